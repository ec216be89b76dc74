// One complete agentdb turn from Node (node-postgres): begin_task -> invoke -> report -> finalize_reply.
// Run: DATABASE_URL=postgresql://... node examples/node/turn.mjs
// Prints one JSON line: the receipt, the gate's verdict and the task status.
import pg from "pg";

const db = new pg.Client({ connectionString: process.env.DATABASE_URL });
await db.connect();
try {
  const one = async (sql, params) => (await db.query(sql, params)).rows[0].v;

  // The trusted runtime opens the task: identity and login state come from here.
  const task = await one(
    "SELECT agentdb.begin_task($1, $2, $3, authenticated => true, lang => 'en', time_zone => 'Asia/Shanghai') AS v",
    ["alice", "node-demo", "remind me to buy vegetables"]);
  const rules = await one("SELECT agentdb.context_rules($1) AS v", [task]);

  // The agent's write: proven in the database or not done at all.
  const receipt = await one("SELECT agentdb.invoke($1, $2, $3::jsonb, call_id => $4) AS v", [
    task, "add_reminder",
    JSON.stringify({ content: "buy vegetables from node", remind_at: "2026-12-01 08:00+08" }),
    "node-1"]);

  // The report for the model's final wording; taking it closes the tools.
  const report = await one("SELECT agentdb.report_text($1) AS v", [task]);

  // Whatever the model says goes through the gate; the user reads verdict.text.
  const modelText = receipt.outcome === "success" && receipt.verified
    ? "I've set a reminder to buy vegetables at 8am."
    : "Sorry, I couldn't save that reminder.";
  const verdict = await one("SELECT agentdb.finalize_reply($1, $2) AS v", [task, modelText]);
  const status = await one("SELECT agentdb.finish_task($1) AS v", [task]);

  console.log(JSON.stringify({ rules, receipt, report, verdict, status }));
} finally {
  await db.end();
}
