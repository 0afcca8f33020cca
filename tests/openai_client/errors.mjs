// The official OpenAI client against `petrel serve`'s errors: a prompt over the context and a
// schema the vocabulary cannot spell, each streamed and not, must be an APIError 400 with
// OpenAI's `code`, raised before any streamed chunk. Usage: node errors.mjs PORT OUT.
// Run from a folder where `npm install openai` put the package (tests/util/openai_client.h).
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";

const require = createRequire(process.cwd() + "/");
const OpenAI = require("openai").default ?? require("openai");

const [port, out] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: `http://127.0.0.1:${port}/v1`, apiKey: process.env.PETREL_API_KEY ?? "unused", maxRetries: 0,
});

const longText = "the cat sat. ".repeat(300);
const cases = {
  context: { messages: [{ role: "user", content: longText }] },
  schema: {
    messages: [{ role: "user", content: "x" }],
    response_format: { type: "json_schema", json_schema: { name: "n", schema: { enum: ["\u00e9"] } } },
  },
};
const result = {};
for (const [name, body] of Object.entries(cases)) {
  for (const stream of [false, true]) {
    let chunks = 0, status = 0, code = null;
    try {
      const reply = await client.chat.completions.create({ model: "petrel", max_tokens: 4, ...body, stream });
      if (stream) for await (const _ of reply) ++chunks;
    } catch (error) {
      status = error.status ?? -1;
      code = error.code ?? null;
    }
    result[`${name}_${stream ? "stream" : "plain"}`] = { status, code, chunks };
  }
}
writeFileSync(out, JSON.stringify(result));
