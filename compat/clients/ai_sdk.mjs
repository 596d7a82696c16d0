// The Vercel AI SDK (`ai` + `@ai-sdk/openai`, its Responses provider, default settings):
// generateText and streamText with a tool the SDK runs itself (multi-step), and a multi-turn
// chat with the provider's default `store: true`, where the SDK sends earlier output back as
// `item_reference` items.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { API_KEY, BASE_URL, MODEL, check, expect, finish } from "./checks.mjs";

const openai = createOpenAI({ baseURL: BASE_URL, apiKey: API_KEY });
const model = openai.responses(MODEL);
const calls = [];
const tools = {
  get_weather: tool({
    description: "The weather in a city.",
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => { calls.push(city); return `windy in ${city}`; },
  }),
};

await check("generateText with a tool", async () => {
  calls.length = 0;
  const result = await generateText({
    model, tools, stopWhen: stepCountIs(3), maxRetries: 0,
    prompt: "please call get_weather city=Rome",
  });
  expect(calls.join() === "Rome", `tool calls ${calls}`);
  expect(result.text.includes("get_weather="), `final text ${JSON.stringify(result.text)}`);
});

await check("streamText with a tool", async () => {
  calls.length = 0;
  const result = streamText({
    model, tools, stopWhen: stepCountIs(3), maxRetries: 0,
    prompt: "please call get_weather city=Kyiv",
    onError: ({ error }) => { throw error; },
  });
  let text = "";
  for await (const part of result.textStream) text += part;
  expect(calls.join() === "Kyiv", `tool calls ${calls}`);
  expect(text.includes("get_weather="), `streamed text ${JSON.stringify(text)}`);
});

await check("multi-turn chat with the default store", async () => {
  const messages = [{ role: "user", content: "first turn" }];
  const one = await generateText({ model, messages, maxRetries: 0 });
  expect(one.text.includes("first turn"), `turn 1 ${JSON.stringify(one.text)}`);
  messages.push(...one.response.messages, { role: "user", content: "second turn" });
  // The request body is kept on the result by default up to `ai` 6, on request from 7 on.
  const two = await generateText({
    model, messages, maxRetries: 0, experimental_include: { requestBody: true },
  });
  expect(two.text.includes("second turn"), `turn 2 ${JSON.stringify(two.text)}`);
  const body = JSON.stringify(two.request.body ?? {});
  expect(body.includes("item_reference"), "turn 2 did not use item_reference (store off?)");
});

finish();
