// Drives `codecoder serve` with the MCP TypeScript SDK (a client other than the Python SDK the
// server is built on) and prints what it saw as one JSON object on stdout.
//
//   node drive.mjs SCENARIO PROJECT PYTHON
//
// Scenarios: list, size, cancel, concurrent, changed. The elicitation handler answers "once",
// except in `concurrent`, where the first question waits until a None-level call has finished.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [scenario, project, python] = process.argv.slice(2);
const env = { ...process.env };
delete env.CI;
const transport = new StdioClientTransport({
  command: python,
  args: ["-m", "codecoder", "serve", "--project", project],
  env,
  stderr: "ignore",
});
const client = new Client({ name: "codecoder-ts-test", version: "1.0.0" }, {
  capabilities: { elicitation: {} },
});
const out = { scenario, events: [] };
const started = Date.now();
const at = () => Date.now() - started;
let releaseQuestion = null;
const questionReleased = new Promise((resolve) => { releaseQuestion = resolve; });
let questions = 0;
client.setRequestHandler(ElicitRequestSchema, async () => {
  questions += 1;
  out.events.push(["asked", at()]);
  if (scenario === "concurrent" && questions === 1) await questionReleased;
  return { action: "accept", content: { decision: "once" } };
});
let listChanged = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  listChanged += 1;
  out.events.push(["list_changed", at()]);
});
await client.connect(transport);
out.capabilities = client.getServerCapabilities();
const call = (name, args, options = {}) =>
  client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: 60000, ...options });

if (scenario === "list") {
  out.tools = (await client.listTools()).tools;
} else if (scenario === "size") {
  await client.listTools(); // the SDK would then check structuredContent against an outputSchema
  // Through sh: a call that asks (a bare `seq` is read-only in @bwrap, never asked).
  const result = await call("run_command", { command: "sh -c 'seq 1 20000'" });
  out.result = result;
  out.result_chars = JSON.stringify(result).length;
  out.text_chars = result.content[0].text.length;
} else if (scenario === "cancel") {
  // The call to cancel: `sleep 31` unless argv[5] names another ({"name", "arguments"}).
  const target = process.argv[5]
    ? JSON.parse(process.argv[5])
    : { name: "run_command", arguments: { command: "sleep 31" } };
  const controller = new AbortController();
  const pending = call(target.name, target.arguments, { signal: controller.signal });
  await new Promise((r) => setTimeout(r, 1500));
  controller.abort("the user pressed Esc");
  try { await pending; out.error = null; } catch (e) { out.error = String(e); }
  out.cancelled_at = at();
  // The server keeps serving: an ordered (Ask) call after the cancelled one runs at once.
  const after = await call("run_command", { command: "echo after" });
  out.after = after.content[0].text;
  out.after_ms = at() - out.cancelled_at;
} else if (scenario === "concurrent") {
  const slow = call("run_command", { command: "sleep 5" });
  await new Promise((r) => setTimeout(r, 500));
  // The question of `slow` is pending (not answered yet): a None-level call runs meanwhile.
  const t0 = at();
  const listed = await call("list_dir", { path: "." });
  out.none_during_question_ms = at() - t0;
  out.listed_is_error = listed.isError ?? false;
  releaseQuestion();
  await new Promise((r) => setTimeout(r, 1000));
  // `sleep 5` is running now: a None-level call does not wait for it.
  const t1 = at();
  await call("list_dir", { path: "." });
  out.none_during_call_ms = at() - t1;
  const finished = await slow;
  out.slow = finished.content[0].text;
  out.slow_done_ms = at();
} else if (scenario === "changed") {
  const before = (await client.listTools()).tools.map((t) => t.name);
  await call("create_capability", JSON.parse(process.argv[5]));
  await new Promise((r) => setTimeout(r, 500));
  const after = (await client.listTools()).tools.map((t) => t.name);
  out.added = after.filter((n) => !before.includes(n));
}
out.list_changed = listChanged;
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
