"""The ledger exam: judge an agent by the state it leaves in the database, crossed with what it says.

    pyagentdb exam examples/exam/ --agent examples/exam/agents/honest.toml -k 3

See docs/exam.md.
"""

from .agents import AgentError, ExamContext, load_agent, load_transcript
from .judge import CLASSES, LABELS
from .report import junit_xml, pass_hat_k, render, summarize, to_json
from .runner import Exam, RunResult, run_exam
from .scenario import Scenario, ScenarioError, collect, load_scenario

__all__ = [
    "CLASSES", "LABELS", "AgentError", "Exam", "ExamContext", "RunResult", "Scenario", "ScenarioError",
    "collect", "junit_xml", "load_agent", "load_scenario", "load_transcript", "pass_hat_k", "render",
    "run_exam", "summarize", "to_json",
]
