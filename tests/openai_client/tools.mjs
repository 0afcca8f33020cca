// The official OpenAI client reading `petrel serve`'s tool calls: tool_choice "required", whole
// and streamed (the deltas accumulated by index as agents do), then the call and its result sent
// back for a final text answer. Usage: node tools.mjs PORT OUT (see errors.mjs).
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";

const require = createRequire(process.cwd() + "/");
const OpenAI = require("openai").default ?? require("openai");

const [port, out] = process.argv.slice(2);
const client = new OpenAI({
  baseURL: `http://127.0.0.1:${port}/v1`, apiKey: process.env.PETREL_API_KEY ?? "unused", maxRetries: 0,
});

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", enum: ["Paris", "London", "Tokyo"] },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
}];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const request = { model: "petrel", messages, tools, tool_choice: "required",
                  parallel_tool_calls: false, max_tokens: 160, temperature: 0 };
const result = {};

const plain = await client.chat.completions.create(request);
const message = plain.choices[0].message;
result.plain = {
  finish_reason: plain.choices[0].finish_reason,
  name: message.tool_calls?.[0]?.function.name,
  arguments: message.tool_calls?.[0]?.function.arguments,
};

const calls = [];
let finish = null;
for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
  const choice = chunk.choices[0];
  if (!choice) continue;
  finish = choice.finish_reason ?? finish;
  for (const call of choice.delta.tool_calls ?? []) {
    calls[call.index] ??= { name: "", arguments: "" };
    if (call.function?.name) calls[call.index].name += call.function.name;
    if (call.function?.arguments) calls[call.index].arguments += call.function.arguments;
  }
}
result.stream = { finish_reason: finish, name: calls[0]?.name, arguments: calls[0]?.arguments };

const answer = await client.chat.completions.create({
  model: "petrel", max_tokens: 8, temperature: 0, tools,
  messages: [...messages, message,
             { role: "tool", tool_call_id: message.tool_calls[0].id, content: '{"temperature": 22}' }],
});
result.answer = answer.choices[0].message.content;
writeFileSync(out, JSON.stringify(result));
