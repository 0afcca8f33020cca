// The official OpenAI client against `petrel serve`'s /v1/embeddings: float and base64 vectors
// of two inputs, and the error a bad `dimensions` raises. Usage: node embeddings.mjs PORT OUT.
// Run from a folder where `npm install openai` put the package (server_embeddings_test does).
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";

const require = createRequire(process.cwd() + "/");
const OpenAI = require("openai").default ?? require("openai");

const [port, out] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const input = ["The quick brown fox jumps over the lazy dog.", "Hello world"];

const floats = await client.embeddings.create({ model: "petrel", input, encoding_format: "float" });
// Without encoding_format the client asks for base64 and decodes it to numbers itself.
const decoded = await client.embeddings.create({ model: "petrel", input });
let badStatus = 0;
try {
  await client.embeddings.create({ model: "petrel", input: "x", dimensions: 32 });
} catch (error) {
  badStatus = error.status ?? -1;
}
writeFileSync(out, JSON.stringify({
  float: floats.data.map((d) => d.embedding),
  base64: decoded.data.map((d) => Array.from(d.embedding)),
  usage: floats.usage,
  bad_status: badStatus,
}));
