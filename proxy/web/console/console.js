// The operator's console: plain JavaScript, no build step, no external asset. Every datum
// comes from /admin/ calls carrying the admin key, which is kept in sessionStorage only.
"use strict";

const KEY = "responses-proxy-admin-key";
const $ = (id) => document.getElementById(id);

function adminKey() { return sessionStorage.getItem(KEY) || ""; }

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function api(path, options = {}) {
  const key = adminKey();
  if (!key) { throw new Error("Paste the admin key to see data."); }
  const headers = Object.assign({ authorization: "Bearer " + key }, options.headers || {});
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (!response.ok) {
    let message = response.status + " " + response.statusText;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response;
}

async function json(path, options) { return (await api(path, options)).json(); }

function cell(row, value) {
  const td = document.createElement("td");
  td.textContent = value === null || value === undefined ? "-" : String(value);
  row.appendChild(td);
  return td;
}

function fill(tbodyId, rows, columns) {
  const body = $(tbodyId);
  body.replaceChildren();
  for (const item of rows) {
    const tr = document.createElement("tr");
    for (const column of columns) {
      const value = typeof column === "function" ? column(item, tr) : item[column];
      if (value !== undefined) { cell(tr, value); }
    }
    body.appendChild(tr);
  }
}

const loaders = {
  async fleet() {
    const fleet = await json("/admin/fleet");
    $("fleet-routing").textContent = "routing: " + fleet.routing;
    fill("fleet-rows", fleet.replicas, [
      "name", (r) => (r.healthy ? "up" : "down"), (r) => r.models.join(", "),
      "vllm_version", "in_flight", "load",
      (r) => (r.metrics ? r.metrics.running : null), (r) => (r.metrics ? r.metrics.waiting : null),
      (r) => (r.metrics && r.metrics.kv_cache_usage !== null
        ? Math.round(r.metrics.kv_cache_usage * 100) + "%" : null),
      (r) => Math.round(r.share * 100) + "%",
    ]);
  },
  async jobs() {
    const jobs = await json("/admin/jobs");
    $("jobs-depth").textContent = jobs.depth;
    fill("perkey-rows", jobs.per_key, ["key", "queued", "running", "streams_here"]);
    fill("job-rows", jobs.jobs, ["id", "key", "state", "status", (job, tr) => {
      const td = document.createElement("td");
      const button = document.createElement("button");
      button.textContent = "Cancel";
      button.className = "cancel";
      button.dataset.id = job.id;
      button.addEventListener("click", () => cancelJob(job.id));
      td.appendChild(button);
      tr.appendChild(td);
      return undefined;
    }]);
  },
  async keys() {
    const keys = await json("/admin/keys");
    fill("key-rows", keys.data, ["id", "name", "rpm", "tpm", "max_streams",
      (k) => (k.usage.tokens_used === null ? "-" : k.usage.tokens_used) + " / " +
        (k.token_budget || "-"),
      (k) => k.usage.stored_bytes + " / " + (k.usage.max_stored_bytes || "-"),
      (k) => (k.expires_at ? new Date(k.expires_at * 1000).toISOString() : null),
      (k, tr) => {
        const td = document.createElement("td");
        const button = document.createElement("button");
        button.textContent = "Revoke";
        button.addEventListener("click", () => revokeKey(k.id));
        td.appendChild(button);
        tr.appendChild(td);
        return undefined;
      }]);
  },
  async inspect() { /* loads on demand: nothing is shown before an id is opened */ },
};

let current = "fleet";

async function load(tab) {
  showError("");
  if (!adminKey()) { showError("Paste the admin key to see data."); return; }
  try { await loaders[tab](); } catch (error) { showError(error.message); }
}

function select(tab) {
  current = tab;
  for (const button of document.querySelectorAll("nav button")) {
    button.classList.toggle("active", button.dataset.tab === tab);
  }
  for (const section of document.querySelectorAll("main section")) {
    section.hidden = section.id !== tab;
  }
  load(tab);
}

async function cancelJob(id) {
  try {
    await api("/admin/jobs/" + encodeURIComponent(id) + "/cancel", { method: "POST" });
    await load("jobs");
  } catch (error) { showError(error.message); }
}

async function revokeKey(id) {
  try {
    await api("/admin/keys/" + encodeURIComponent(id), { method: "DELETE" });
    await load("keys");
  } catch (error) { showError(error.message); }
}

async function createKey(event) {
  event.preventDefault();
  const body = { name: $("new-name").value };
  if ($("new-rpm").value) { body.rpm = Number($("new-rpm").value); }
  if ($("new-budget").value) { body.token_budget = Number($("new-budget").value); }
  try {
    const made = await json("/admin/keys", {
      method: "POST", body: JSON.stringify(body),
      headers: { "content-type": "application/json" },
    });
    $("new-secret-value").textContent = made.key;
    $("new-secret").hidden = false;
    await load("keys");
  } catch (error) { showError(error.message); }
}

function text(items) {
  return JSON.stringify(items, null, 2);
}

async function openResponse(event) {
  event.preventDefault();
  showError("");
  const id = $("lookup-id").value.trim();
  try {
    const seen = await json("/admin/responses/" + encodeURIComponent(id));
    const response = seen.response;
    $("r-status").textContent = response.status;
    $("r-key").textContent = seen.key;
    $("r-model").textContent = response.model;
    $("r-usage").textContent = response.usage ? text(response.usage) : "-";
    $("r-chain").textContent = seen.chain.join(" \u2192 ");
    $("r-input").textContent = text(seen.input_items);
    $("r-output").textContent = text(response.output);
    $("r-events").replaceChildren();
    $("inspection").hidden = false;
    $("inspection").dataset.id = id;
  } catch (error) { showError(error.message); }
}

// Server-sent events read through fetch (EventSource cannot send the admin key): each event
// is listed as it arrives, live while the response is still being generated.
async function replay() {
  const id = $("inspection").dataset.id;
  const after = $("replay-after").value;
  const list = $("r-events");
  list.replaceChildren();
  const query = after === "" ? "" : "?starting_after=" + encodeURIComponent(after);
  try {
    const response = await api("/admin/responses/" + encodeURIComponent(id) + "/events" + query);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) { break; }
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trim()).join("\n");
        if (!data) { continue; }
        let event;
        try { event = JSON.parse(data); } catch (_) { continue; }
        const item = document.createElement("li");
        item.className = "event";
        item.textContent = event.sequence_number + " " + event.type +
          (event.delta ? " " + JSON.stringify(event.delta) : "");
        list.appendChild(item);
      }
    }
  } catch (error) { showError(error.message); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("admin-key").value.trim());
    $("admin-key").value = "";
    load(current);
  });
  $("forget").addEventListener("click", () => { sessionStorage.removeItem(KEY); select(current); });
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => select(button.dataset.tab));
  }
  for (const button of document.querySelectorAll("button.refresh")) {
    button.addEventListener("click", () => load(button.dataset.load));
  }
  $("new-key").addEventListener("submit", createKey);
  $("lookup").addEventListener("submit", openResponse);
  $("replay").addEventListener("click", replay);
  select("fleet");
});
