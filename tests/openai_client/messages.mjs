// The official Anthropic client against `petrel serve`'s /v1/messages: a whole message, the
// same message streamed (raw events, and the SDK's MessageStream accumulating them), a tool_use
// forced by tool_choice "any" whose input goes back as a tool_result, and the error of a request
// without max_tokens. Usage: node messages.mjs PORT OUT; writes what it saw as JSON to OUT.
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";

const require = createRequire(process.cwd() + "/");
const sdk = require("@anthropic-ai/sdk");
const Anthropic = sdk.default ?? sdk.Anthropic ?? sdk;

const [port, out] = process.argv.slice(2);
const client = new Anthropic({
  baseURL: `http://127.0.0.1:${port}`, apiKey: process.env.PETREL_API_KEY ?? "unused", maxRetries: 0,
});
const result = {};

const request = {
  model: "petrel", max_tokens: 24, temperature: 0,
  system: "You tell short stories.",
  messages: [{ role: "user", content: [{ type: "text", text: "Once upon a time" }] }],
};
const plain = await client.messages.create(request);
result.plain = {
  id: plain.id, type: plain.type, role: plain.role, stop_reason: plain.stop_reason,
  content_types: plain.content.map((block) => block.type),
  text: plain.content.filter((block) => block.type === "text").map((block) => block.text).join(""),
  usage: plain.usage,
};

const events = [];
let streamed = "";
for await (const event of await client.messages.create({ ...request, stream: true })) {
  events.push(event.type);
  if (event.type === "content_block_delta" && event.delta.type === "text_delta") {
    streamed += event.delta.text;
  }
}
result.stream = { events, text: streamed };
const final = await client.messages.stream(request).finalMessage();
result.message_stream = {
  stop_reason: final.stop_reason, usage: final.usage,
  text: final.content.filter((block) => block.type === "text").map((block) => block.text).join(""),
};

const tools = [{
  name: "get_weather",
  description: "The weather in a city",
  input_schema: {
    type: "object",
    properties: {
      city: { type: "string", enum: ["Paris", "London", "Tokyo"] },
      unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    },
    required: ["city", "unit"],
    additionalProperties: false,
  },
}];
const question = { role: "user", content: "What is the weather in Paris?" };
const toolRequest = {
  model: "petrel", max_tokens: 160, temperature: 0, tools,
  tool_choice: { type: "any", disable_parallel_tool_use: true }, messages: [question],
};
const called = await client.messages.create(toolRequest);
const use = called.content.find((block) => block.type === "tool_use");
result.tool = { stop_reason: called.stop_reason, id: use?.id, name: use?.name, input: use?.input };
const streamedCall = await client.messages.stream(toolRequest).finalMessage();
const streamedUse = streamedCall.content.find((block) => block.type === "tool_use");
result.tool_stream = {
  stop_reason: streamedCall.stop_reason, name: streamedUse?.name, input: streamedUse?.input,
};
const answer = await client.messages.create({
  model: "petrel", max_tokens: 8, temperature: 0, tools,
  messages: [question, { role: "assistant", content: called.content },
             { role: "user", content: [{ type: "tool_result", tool_use_id: use.id,
                                         content: '{"temperature": 22}' }] }],
});
result.answer = { stop_reason: answer.stop_reason, content_types: answer.content.map((b) => b.type) };

try {
  await client.messages.create({ model: "petrel", messages: [question] });
  result.missing_max_tokens = { status: 200 };
} catch (error) {
  result.missing_max_tokens = { status: error.status, body: error.error };
}
writeFileSync(out, JSON.stringify(result));
