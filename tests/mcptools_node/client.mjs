// Lists mend's tools and calls each "name json-arguments" pair given, with the official MCP
// TypeScript SDK's client (streamable HTTP); prints one JSON line per call. For test_mcptools.py.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, ...calls] = process.argv.slice(2);
const client = new Client({ name: "mend-test-ts", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const listed = await client.listTools();
console.log(JSON.stringify({ tools: listed.tools.map((t) => t.name) }));
for (let i = 0; i < calls.length; i += 2) {
  const result = await client.callTool({ name: calls[i], arguments: JSON.parse(calls[i + 1]) });
  console.log(JSON.stringify(result));
}
await client.close();
