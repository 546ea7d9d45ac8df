// A Cosmos DB-compatible server for tests: @vercel/cosmosdb-server, fixed and instrumented.
//
//   node tests/support/cosmos_server.mjs [--exit-with-stdin]
//
// Prints one JSON line, {"port": N, "adminPort": M}, once both ports listen on 127.0.0.1:
//   https://127.0.0.1:N/  the Cosmos DB API (self-signed certificate; any key is accepted)
//   http://127.0.0.1:M/   the admin API below (plain HTTP, for tests only)
//
// Two gaps of the stock server are closed: a point read of a missing item answers 404 (the
// stock handler fails with 500), and connections are kept alive (the stock CLI answers every
// request with `Connection: close`, costing a TLS handshake per request).
//
// Admin API (JSON in, JSON out):
//   GET    /counts  requests received since the last reset, by operation:
//                   {"read", "query", "create", "replace", "upsert", "patch", "delete",
//                    "write" (the five write kinds together), "other" (databases, containers,
//                    account metadata), "faults" (requests answered by an injected fault)}
//   POST   /reset   zero the counts and drop every pending fault
//   POST   /faults  {"op": "read"|"query"|"create"|"replace"|"upsert"|"patch"|"delete"|"write"|"any",
//                    "status": 429|503|..., "count": N, "retryAfterMs": M, "when": "before"|"after",
//                    "path": "<regular expression the URL path must match>"}
//                   The next N matching requests get `status`. "before" (the default) answers
//                   without touching the data; "after" applies the request, then answers `status`
//                   instead of the real response (a write whose response was lost).
//   GET    /faults  the faults still pending (with the count left)
//   DELETE /faults  drop every pending fault
// With --exit-with-stdin the process also exits when its standard input closes, so it never
// outlives the test run that started it. Without it, stop it with Ctrl-C or SIGTERM.

import { once } from "node:events";
import http from "node:http";
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

const require = createRequire(import.meta.url);

// Patched before the library's router captures the handler (routes.js reads it on load).
const readDocument = require("@vercel/cosmosdb-server/lib/handler/read-document");
const { parsePartitionKey } = require("@vercel/cosmosdb-server/lib/utils/get-partition-from-header");
const stockReadDocument = readDocument.default;
readDocument.default = (account, req, res, params) => {
  const collection = account.database(params.dbId).collection(params.collId);
  if (collection.read()) {
    const header = req.headers["x-ms-documentdb-partitionkey"];
    let partition;
    try {
      partition = parsePartitionKey(Array.isArray(header) ? header[0] : header, params.docId);
    } catch {
      partition = undefined;
    }
    if (partition !== undefined && !collection.document(params.docId, partition).read()) {
      res.statusCode = 404;
      return {
        code: "NotFound",
        message: "Entity with the specified id does not exist in the system.",
      };
    }
  }
  return stockReadDocument(account, req, res, params);
};

const { createHttpsServer } = require("@vercel/cosmosdb-server");

const WRITES = new Set(["create", "replace", "upsert", "patch", "delete"]);

function isTrue(value) {
  return typeof value === "string" && value.toLowerCase() === "true";
}

/** The kind of operation a Cosmos DB API request is, for counting and fault matching. */
function operationOf(req) {
  const path = new URL(req.url, "https://localhost").pathname.replace(/^\/+/, "/").replace(/\/+$/, "");
  const isItem = /^\/dbs\/[^/]+\/colls\/[^/]+\/docs\/[^/]+$/.test(path);
  const isItems = /^\/dbs\/[^/]+\/colls\/[^/]+\/docs$/.test(path);
  if (isItems && req.method === "POST") {
    if (isTrue(req.headers["x-ms-documentdb-isquery"]) || req.headers["content-type"] === "application/query+json") {
      return "query";
    }
    return isTrue(req.headers["x-ms-documentdb-is-upsert"]) ? "upsert" : "create";
  }
  if (isItem) {
    return { GET: "read", PUT: "replace", PATCH: "patch", DELETE: "delete" }[req.method] ?? "other";
  }
  return "other";
}

function emptyCounts() {
  const counts = { write: 0, other: 0, faults: 0, query: 0, read: 0 };
  for (const op of WRITES) counts[op] = 0;
  return counts;
}

let counts = emptyCounts();
let faults = [];

function takeFault(op, path) {
  for (const fault of faults) {
    const opMatches = fault.op === "any" || fault.op === op || (fault.op === "write" && WRITES.has(op));
    if (fault.count > 0 && opMatches && (!fault.path || new RegExp(fault.path).test(path))) {
      fault.count -= 1;
      faults = faults.filter((f) => f.count > 0);
      return fault;
    }
  }
  return null;
}

function answerFault(res, fault) {
  const status = fault.status;
  const body = JSON.stringify({
    code: status === 429 ? "TooManyRequests" : "ServiceUnavailable",
    message: `Injected fault: ${status}`,
  });
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.setHeader("x-ms-activity-id", randomUUID());
  res.setHeader("x-ms-request-charge", "0");
  if (fault.retryAfterMs !== undefined) res.setHeader("x-ms-retry-after-ms", String(fault.retryAfterMs));
  res.end(body);
}

/** A stand-in response the library writes into when the real one is replaced by a fault. */
function discardingResponse(onEnd) {
  return {
    statusCode: 200,
    finished: false,
    headersSent: false,
    setHeader() {},
    getHeader() {
      return undefined;
    },
    end() {
      this.finished = true;
      onEnd();
    },
  };
}

const cosmos = createHttpsServer({ keepAlive: true });
// Longer than any client's idle-connection timeout, so a client never reuses a socket the
// server has just closed.
cosmos.keepAliveTimeout = 600_000;
const [libraryHandler] = cosmos.listeners("request");
cosmos.removeAllListeners("request");
cosmos.on("request", (req, res) => {
  const op = operationOf(req);
  counts[op] += 1;
  if (WRITES.has(op)) counts.write += 1;
  const fault = takeFault(op, new URL(req.url, "https://localhost").pathname);
  if (fault === null) {
    libraryHandler(req, res);
    return;
  }
  counts.faults += 1;
  if (fault.when === "after") {
    libraryHandler(req, discardingResponse(() => answerFault(res, fault)));
    return;
  }
  req.resume();
  req.on("end", () => answerFault(res, fault));
});

async function readJson(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : {};
}

function reply(res, status, value) {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(JSON.stringify(value));
}

const admin = http.createServer(async (req, res) => {
  try {
    const path = new URL(req.url, "http://localhost").pathname;
    if (path === "/counts" && req.method === "GET") return reply(res, 200, counts);
    if (path === "/reset" && req.method === "POST") {
      counts = emptyCounts();
      faults = [];
      return reply(res, 200, counts);
    }
    if (path === "/faults" && req.method === "GET") return reply(res, 200, faults);
    if (path === "/faults" && req.method === "DELETE") {
      faults = [];
      return reply(res, 200, faults);
    }
    if (path === "/faults" && req.method === "POST") {
      const body = await readJson(req);
      const fault = {
        op: body.op ?? "any",
        status: Number(body.status ?? 503),
        count: Number(body.count ?? 1),
        when: body.when === "after" ? "after" : "before",
        path: body.path ?? null,
      };
      if (body.retryAfterMs !== undefined) fault.retryAfterMs = Number(body.retryAfterMs);
      faults.push(fault);
      return reply(res, 200, fault);
    }
    return reply(res, 404, { message: "no such admin route" });
  } catch (error) {
    return reply(res, 400, { message: String(error) });
  }
});

cosmos.listen(0, "127.0.0.1");
admin.listen(0, "127.0.0.1");
await Promise.all([once(cosmos, "listening"), once(admin, "listening")]);
process.stdout.write(`${JSON.stringify({ port: cosmos.address().port, adminPort: admin.address().port })}\n`);

if (process.argv.includes("--exit-with-stdin")) {
  process.stdin.on("end", () => process.exit(0));
  process.stdin.resume();
}
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
