// The official Node SDK: the stream helper, a background response polled to the end, a
// background stream cut and resumed with `starting_after`, a function tool round trip.
import OpenAI from "openai";
import { API_KEY, BASE_URL, MODEL, check, expect, finish } from "./checks.mjs";

const client = new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

await check("stream helper", async () => {
  const stream = client.responses.stream({ model: MODEL, input: "hello from the node sdk" });
  let text = "";
  stream.on("response.output_text.delta", (event) => { text += event.delta; });
  const final = await stream.finalResponse();
  expect(final.status === "completed", `status ${final.status}`);
  expect(final.output_text === text, "deltas differ from the final text");
  expect(text.includes("hello from the node sdk"), `unexpected answer ${text}`);
});

await check("background", async () => {
  let job = await client.responses.create({
    model: MODEL, input: "a background job [[sim tokens=20]]", background: true,
  });
  expect(["queued", "in_progress"].includes(job.status), `first status ${job.status}`);
  const deadline = Date.now() + 30_000;
  while (["queued", "in_progress"].includes(job.status) && Date.now() < deadline) {
    await sleep(200);
    job = await client.responses.retrieve(job.id);
  }
  expect(job.status === "completed", `ended ${job.status}`);
  expect(job.output_text.split(/\s+/).filter(Boolean).length === 20, `answer ${job.output_text}`);
});

await check("resume with starting_after", async () => {
  const stream = await client.responses.create({
    model: MODEL, input: "resume me [[sim tokens=30 delay_ms=20]]", background: true,
    stream: true,
  });
  const seen = [];
  for await (const event of stream) {
    seen.push(event);
    if (seen.length === 5) break; // leaving the loop aborts the request
  }
  const id = seen[0].response.id;
  const last = seen[seen.length - 1].sequence_number;
  const rest = [];
  const resumed = await client.responses.retrieve(id, { stream: true, starting_after: last });
  for await (const event of resumed) rest.push(event);
  expect(rest.length && rest[0].sequence_number === last + 1,
    `resumed at ${rest.length ? rest[0].sequence_number : "nothing"}, wanted ${last + 1}`);
  const end = rest[rest.length - 1];
  expect(end.type === "response.completed", `ended with ${end.type}`);
  const text = [...seen, ...rest].filter((e) => e.type === "response.output_text.delta")
    .map((e) => e.delta).join("");
  // Events carry the raw Response object: the SDK's `output_text` helper is not on it.
  const final = end.response.output.filter((item) => item.type === "message")
    .flatMap((item) => item.content).filter((part) => part.type === "output_text")
    .map((part) => part.text).join("");
  expect(text === final && text.split(/\s+/).filter(Boolean).length === 30,
    `the two halves make ${JSON.stringify(text)}, the answer is ${JSON.stringify(final)}`);
});

await check("function tool round trip", async () => {
  const tools = [{
    type: "function", name: "get_weather", description: "Weather in a city.", strict: true,
    parameters: {
      type: "object", properties: { city: { type: "string" } }, required: ["city"],
      additionalProperties: false,
    },
  }];
  const first = await client.responses.create({
    model: MODEL, tools, input: "please call get_weather city=Lima",
  });
  const calls = first.output.filter((item) => item.type === "function_call");
  expect(calls.length === 1 && calls[0].name === "get_weather", JSON.stringify(first.output));
  const second = await client.responses.create({
    model: MODEL, tools, previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "rainy" }],
  });
  expect(second.output_text === "Tool results: get_weather=rainy", second.output_text);
});

finish();
