/**
 * An independent MCP client for Anvil, built on the official TypeScript SDK
 * (@modelcontextprotocol/sdk), the library many editors embed.
 *
 * It connects over Streamable HTTP with an optional bearer token, lists the tools, asks two
 * questions in one conversation and checks turn 1, then turn 2, and that the second answer saw
 * the first. Every `structuredContent` is checked twice against the `outputSchema` that
 * `tools/list` advertised: by the SDK client itself (it validates tool output whenever a schema
 * is known) and explicitly with the SDK's own Ajv validator.
 *
 * Run it with Node 22 (types are stripped, nothing is compiled):
 *
 *     node --experimental-strip-types tests/interop/ts-client/anvil-client.mts URL [TOKEN]
 *
 * URL is the MCP endpoint (e.g. http://127.0.0.1:8000/mcp); ANVIL_MCP_URL and ANVIL_TOKEN are
 * read when the arguments are absent. Leave the token out when sign-in is off. Prints one
 * `ok:` line per check; on the first mismatch prints `anvil-client: FAILED: ...` and exits 1.
 */
import { randomUUID } from "node:crypto";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult, Tool } from "@modelcontextprotocol/sdk/types.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";

/** The answer envelope Anvil returns as `structuredContent` of `ask`. */
interface AskOutput {
  answer: string;
  conversationId: string | null;
  note: string | null;
  created: boolean;
  turn: number | null;
  condensed: boolean;
  sources: unknown[];
}

class Mismatch extends Error {}

function check(condition: unknown, message: string): asserts condition {
  if (!condition) {
    throw new Mismatch(message);
  }
}

function ok(message: string): void {
  console.log(`ok: ${message}`);
}

const validators = new AjvJsonSchemaValidator();

/** Validate `structuredContent` against the advertised schema with the SDK's own validator. */
function validateOutput(tool: Tool, result: CallToolResult, label: string): AskOutput {
  check(result.isError !== true, `${label}: ask returned an error: ${JSON.stringify(result.content)}`);
  check(result.structuredContent !== undefined, `${label}: no structuredContent`);
  check(tool.outputSchema !== undefined, `${tool.name} advertises no outputSchema`);
  const verdict = validators.getValidator<AskOutput>(tool.outputSchema)(result.structuredContent);
  check(
    verdict.valid,
    `${label}: structuredContent does not match the outputSchema: ${verdict.errorMessage}`,
  );
  const output = verdict.data;
  const text = result.content.find((block) => block.type === "text");
  check(
    text !== undefined && text.type === "text" && text.text === output.answer,
    `${label}: the text content is not the answer (${JSON.stringify(result.content)})`,
  );
  return output;
}

async function run(url: URL, token: string | undefined): Promise<void> {
  const headers: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  const client = new Client({ name: "anvil-ts-client", version: "1.0.0" });
  await client.connect(transport);
  try {
    const server = client.getServerVersion();
    check(server?.name === "anvil", `connected to ${JSON.stringify(server)}, not to Anvil`);
    ok(`connected to ${server.name} ${server.version}`);

    const { tools } = await client.listTools();
    const ask = tools.find((tool) => tool.name === "ask");
    check(ask !== undefined, `tools/list has no ask tool (${tools.map((t) => t.name).join(", ")})`);
    check(ask.outputSchema !== undefined, "ask advertises no outputSchema");
    ok(`tools/list: ${tools.map((t) => t.name).join(", ")}`);

    // The advertised schema must constrain the envelope, not accept anything.
    const probe = validators.getValidator(ask.outputSchema)({ answer: 42 });
    check(!probe.valid, "ask's outputSchema accepts a malformed envelope");
    ok("ask's outputSchema rejects a malformed envelope");

    const conversationId = `ts-${randomUUID()}`;
    const first = "What is Anvil?";
    const second = "And where does it keep conversations?";

    // callTool also runs the SDK's own outputSchema check, cached by listTools above.
    const one = validateOutput(
      ask,
      (await client.callTool({
        name: "ask",
        arguments: { question: first, conversationId },
      })) as CallToolResult,
      "turn 1",
    );
    check(one.conversationId === conversationId, `turn 1: conversationId is ${one.conversationId}`);
    check(one.turn === 1 && one.created, `turn 1: turn=${one.turn} created=${one.created}`);
    ok("turn 1 started the conversation and matches the outputSchema");

    const two = validateOutput(
      ask,
      (await client.callTool({
        name: "ask",
        arguments: { question: second, conversationId },
      })) as CallToolResult,
      "turn 2",
    );
    check(two.conversationId === conversationId, `turn 2: conversationId is ${two.conversationId}`);
    check(two.turn === 2 && !two.created, `turn 2: turn=${two.turn} created=${two.created}`);
    ok("turn 2 continued the conversation and matches the outputSchema");

    // The echo engine names the previous question; any other engine is judged by turn alone.
    if (two.answer.startsWith("Echo:")) {
      check(
        two.answer.includes(`previous question: ${first}`),
        `turn 2 did not see turn 1: ${JSON.stringify(two.answer)}`,
      );
      ok("turn 2 saw turn 1 (the echo engine names the previous question)");
    }
  } finally {
    await client.close();
  }
}

const target = process.argv[2] ?? process.env.ANVIL_MCP_URL;
const token = process.argv[3] ?? process.env.ANVIL_TOKEN;
if (!target) {
  console.error("usage: node --experimental-strip-types anvil-client.mts MCP_URL [TOKEN]");
  process.exit(2);
}
try {
  await run(new URL(target), token || undefined);
  console.log("anvil-client: all checks passed");
} catch (error) {
  const reason = error instanceof Error ? error.message : String(error);
  console.error(`anvil-client: FAILED: ${reason}`);
  process.exitCode = 1;
}
