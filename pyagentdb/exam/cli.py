"""`pyagentdb exam SCENARIOS... --agent SPEC -k N`: the command-line face of the exam."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_FAILED = 1


def add_parser(sub, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "exam", parents=[common], help="judge an agent by the state it leaves (ledger exam)",
        description="Run each scenario in a fresh database, judge the agent by the state it left crossed "
        "with what it said, and report pass^k. Exit code 1 when any run fails, 2 for bad input.",
    )
    p.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                   help="scenario .toml files, or directories holding them")
    p.add_argument("--agent", required=True, metavar="SPEC",
                   help="noop | liar | openai | TRANSCRIPT.toml/.json | module:function | file.py:function")
    p.add_argument("-k", type=int, default=1, metavar="K", help="k of pass^k; also the runs per scenario")
    p.add_argument("--runs", type=int, metavar="N", help="runs per scenario (default K; must be >= K)")
    p.add_argument("--base-url", help="--agent openai: the endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="--agent openai: the model name")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="--agent openai: environment variable holding the API key (default OPENAI_API_KEY)")
    p.add_argument("--max-turns", type=int, default=8, help="--agent openai: model turns per run (default 8)")
    p.add_argument("--timeout", type=float, default=60.0, help="--agent openai: seconds per request")
    p.add_argument("--junit", metavar="FILE", help="also write JUnit XML (one testcase per scenario x run)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report (chart, tables, "
                   "what each run claimed against what the books show)")
    p.add_argument("--keep", action="store_true", help="keep each run's database (names in --json output)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--no-color", action="store_true", help="no ANSI colour")
    p.set_defaults(func=cmd_exam)
    return p


def _progress(quiet: bool):
    if quiet:
        return None
    from .. import textui
    from .judge import LABELS

    running: list = []

    def show(i, total, scenario, run, result):
        width = len(str(total))
        if result is None:  # a run starts: its elapsed time shows if it takes over 2 s
            running.append(textui.progress(f"[{i:>{width}}/{total}] {scenario.name} #{run}").__enter__())
            return
        if running:
            running.pop().__exit__(None, None, None)
        mark = "ok  " if result.passed else "FAIL"
        print(f"[{i:>{width}}/{total}] {mark} {scenario.name} #{run}: {LABELS[result.cls]} "
              f"({result.seconds:.1f}s)", file=sys.stderr, flush=True)

    return show


def cmd_exam(args) -> int:
    from .. import server, textui
    from ..cli import CommandError, UsageError
    from . import agents, report, runner, scenario

    runs = args.runs if args.runs is not None else args.k
    if args.k < 1:
        raise UsageError("-k must be at least 1", speaker="pyagentdb exam")
    if runs < args.k:
        raise UsageError(f"--runs {runs} is fewer than k={args.k}: pass^k needs at least k runs",
                         speaker="pyagentdb exam")
    try:
        scenarios = scenario.collect(args.scenarios)
        agent = agents.load_agent(args.agent, base_url=args.base_url, model=args.model,
                                  api_key=os.environ.get(args.api_key_env), max_turns=args.max_turns,
                                  timeout=args.timeout)
        if isinstance(agent, agents.Transcript):
            agent.check_covers([s.name for s in scenarios])
    except (scenario.ScenarioError, agents.AgentError) as exc:
        raise UsageError(str(exc), code="bad_input", speaker="pyagentdb exam") from exc

    outputs = {flag: getattr(args, flag) for flag in ("junit", "html") if getattr(args, flag)}
    for flag, name in outputs.items():  # before the runs: a typo should not cost a whole exam
        path = Path(name).absolute()
        why = ("is a directory" if path.is_dir() else None if path.parent.is_dir()
               and os.access(path.parent, os.W_OK) else f"{path.parent} is not a writable directory")
        if why:
            raise UsageError(f"--{flag} {name}: cannot write the file there ({why})", code="bad_output",
                             speaker="pyagentdb exam")

    target = server.resolve(args.dsn, args.data_dir)
    try:
        results = runner.run_exam(target.dsn, scenarios, agent, runs, keep=args.keep,
                                  progress=_progress(args.quiet or args.json))
    except scenario.ScenarioError as exc:
        raise UsageError(str(exc), code="bad_input", speaker="pyagentdb exam") from exc

    from . import html

    pages = {"junit": lambda: report.junit_xml(scenarios, results, args.k),
             "html": lambda: html.page(scenarios, results, args.k, args.agent).encode()}
    for flag, name in outputs.items():
        try:
            Path(name).write_bytes(pages[flag]())
        except OSError as exc:
            raise CommandError(f"--{flag} {name}: {exc.strerror or exc}", code="bad_output",
                               speaker="pyagentdb exam") from exc
    if args.json:
        data = report.to_json(scenarios, results, args.k, args.agent)
        print(json.dumps(data, ensure_ascii=False, default=str))
    else:
        color = False if args.no_color else textui.use_color(sys.stdout)
        print(report.render(scenarios, results, args.k, color=color))
    return 0 if report.summarize(scenarios, results, args.k)["ok"] else EXIT_FAILED
