// The chat page of `petrel serve`: conversations kept in this browser's localStorage, replies
// streamed from /v1/chat/completions, rendered as a small markdown subset.
//
// Model text is never parsed as HTML: every node is made with createElement and filled with
// textContent (or append of a string, which makes a text node), so a reply that writes <script>
// or <img onerror=...> shows those characters. The server's Content-Security-Policy forbids
// inline script as a second wall.
"use strict";

const kConversationsKey = "petrel.conversations";
const kCurrentKey = "petrel.current";
const kSettingsKey = "petrel.settings";
const kApiKeyKey = "petrel.apiKey";

// The sampler fields of the settings panel, sent when not empty (docs/SERVER.md, Request fields).
const kSamplerFields = [
  { name: "temperature", label: "Temperature", kind: "float", step: "0.05", min: "0", max: "2" },
  { name: "top_p", label: "Top p", kind: "float", step: "0.01", min: "0", max: "1" },
  { name: "top_k", label: "Top k", kind: "int", step: "1", min: "0" },
  { name: "min_p", label: "Min p", kind: "float", step: "0.01", min: "0", max: "1" },
  { name: "repeat_penalty", label: "Repeat penalty", kind: "float", step: "0.05", min: "0" },
  { name: "presence_penalty", label: "Presence penalty", kind: "float", step: "0.1", min: "-2", max: "2" },
  { name: "frequency_penalty", label: "Frequency penalty", kind: "float", step: "0.1", min: "-2", max: "2" },
  { name: "max_tokens", label: "Max tokens", kind: "int", step: "1", min: "1" },
  { name: "seed", label: "Seed", kind: "int", step: "1" },
];

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---- Storage. What is read back is checked field by field: it may come from an older page or
// have been edited by hand, and it is rendered as text whatever it holds.

function readJson(key, fallback) {
  try {
    const value = JSON.parse(localStorage.getItem(key));
    return value === null ? fallback : value;
  } catch {
    return fallback;
  }
}

function asText(value) {
  return typeof value === "string" ? value : "";
}

function asNumber(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

function loadConversations() {
  const stored = readJson(kConversationsKey, []);
  if (!Array.isArray(stored)) return [];
  const conversations = [];
  for (const item of stored) {
    if (!item || typeof item !== "object" || !Array.isArray(item.messages)) continue;
    const messages = item.messages
      .filter((m) => m && (m.role === "user" || m.role === "assistant"))
      .map((m) => ({
        role: m.role,
        content: asText(m.content),
        reasoning: asText(m.reasoning),
        finish: asText(m.finish),
        stats: m.stats && typeof m.stats === "object"
          ? { tokens: asNumber(m.stats.tokens), seconds: asNumber(m.stats.seconds), rate: asNumber(m.stats.rate) }
          : null,
      }));
    conversations.push({
      id: asText(item.id) || newId(),
      title: asText(item.title) || "Conversation",
      updated: Number(item.updated) || 0,
      messages,
    });
  }
  conversations.sort((a, b) => b.updated - a.updated);
  return conversations;
}

function saveConversations() {
  try {
    localStorage.setItem(kConversationsKey, JSON.stringify(state.conversations));
    localStorage.setItem(kCurrentKey, state.currentId || "");
  } catch (error) {
    showError("could not save the conversations in this browser: " + error.message);
  }
}

function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

const state = {
  conversations: loadConversations(),
  currentId: localStorage.getItem(kCurrentKey) || "",
  // The reply being streamed: { conversation, message, controller, view }, or null.
  streaming: null,
};

function current() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

// ---- Markdown, a small subset: paragraphs, fenced code blocks, lists, headings, **bold** and
// `code`. Everything else stays as the model wrote it.

const kFence = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/;
const kListItem = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
const kHeading = /^(#{1,6})\s+(.*)$/;

function renderInline(parent, text) {
  const pattern = /(`+)([\s\S]+?)\1|\*\*([\s\S]+?)\*\*/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) parent.append(text.slice(last, match.index));
    if (match[1]) {
      parent.append(el("code", "", match[2]));
    } else {
      const bold = el("strong");
      renderInline(bold, match[3]);
      parent.append(bold);
    }
    last = match.index + match[0].length;
  }
  if (last < text.length) parent.append(text.slice(last));
}

function renderMarkdown(parent, text) {
  parent.replaceChildren();
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(kFence);
    if (fence) {
      // An unclosed fence (a reply still streaming) runs to the end of the text.
      const marker = fence[1];
      const body = [];
      for (++i; i < lines.length && !lines[i].trim().startsWith(marker); ++i) body.push(lines[i]);
      ++i;
      const pre = el("pre");
      const code = el("code", "", body.join("\n"));
      if (fence[2]) code.dataset.lang = fence[2];
      pre.append(code);
      parent.append(pre);
      continue;
    }
    if (line.trim() === "") {
      ++i;
      continue;
    }
    const heading = line.match(kHeading);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);  // h3..h6: below the page's own headings
      const node = el("h" + level);
      renderInline(node, heading[2]);
      parent.append(node);
      ++i;
      continue;
    }
    const item = line.match(kListItem);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const list = el(ordered ? "ol" : "ul");
      if (ordered && parseInt(item[1], 10) !== 1) list.start = parseInt(item[1], 10);
      for (let m; i < lines.length && (m = lines[i].match(kListItem)) && /\d/.test(m[1]) === ordered; ++i) {
        const entry = el("li");
        renderInline(entry, m[2]);
        list.append(entry);
      }
      parent.append(list);
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() !== "" && !kFence.test(lines[i]) &&
           !kListItem.test(lines[i]) && !kHeading.test(lines[i])) {
      paragraph.push(lines[i++]);
    }
    const node = el("p");
    renderInline(node, paragraph.join("\n").trim());
    parent.append(node);
  }
}

// ---- Messages.

function formatStats(message) {
  const parts = [];
  const stats = message.stats;
  if (stats && stats.tokens > 0) parts.push(stats.tokens + (stats.tokens === 1 ? " token" : " tokens"));
  if (stats && stats.rate > 0) parts.push(stats.rate.toFixed(1) + " tokens/s");
  if (message.finish === "stopped") parts.push("stopped");
  if (message.finish === "length") parts.push("max tokens reached");
  if (message.finish === "error") parts.push("ended with an error");
  return parts.join(" · ");
}

// Builds a message's nodes once; update() redraws its text in place.
function messageView(message) {
  const root = el("div", "message");
  root.dataset.role = message.role;
  root.append(el("div", "role", message.role === "user" ? "You" : "Assistant"));
  const reasoning = el("details", "reasoning");
  const summary = el("summary", "", "Reasoning");
  const reasoningBody = el("div", "reasoning-body");
  reasoning.append(summary, reasoningBody);
  const content = el("div", "content");
  const stats = el("div", "stats");
  root.append(reasoning, content, stats);
  const view = {
    root,
    update(streaming) {
      root.dataset.state = streaming ? "streaming" : message.finish || "done";
      reasoning.hidden = message.reasoning === "";
      if (message.reasoning !== "") {
        summary.textContent = streaming && message.content === "" ? "Reasoning…" : "Reasoning";
        renderMarkdown(reasoningBody, message.reasoning);
      }
      if (message.role === "user") {
        content.textContent = message.content;  // the user's text exactly as typed
      } else {
        renderMarkdown(content, message.content);
      }
      stats.textContent = formatStats(message);
    },
  };
  view.update(false);
  return view;
}

function nearBottom(box) {
  return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
}

function renderConversation() {
  const box = $("messages");
  box.replaceChildren();
  const conversation = current();
  if (!conversation) return;
  for (const message of conversation.messages) {
    const view = messageView(message);
    if (state.streaming && state.streaming.message === message) {
      state.streaming.view = view;
      view.update(true);
    }
    box.append(view.root);
  }
  box.scrollTop = box.scrollHeight;
}

function renderList() {
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of state.conversations) {
    const item = el("li");
    item.dataset.id = conversation.id;
    if (conversation.id === state.currentId) item.className = "current";
    const open = el("button", "open", conversation.title);
    open.type = "button";
    open.title = conversation.title;
    open.addEventListener("click", () => {
      state.currentId = conversation.id;
      saveConversations();
      renderList();
      renderConversation();
    });
    const remove = el("button", "delete", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", "Delete this conversation");
    remove.addEventListener("click", () => deleteConversation(conversation.id));
    item.append(open, remove);
    list.append(item);
  }
}

function deleteConversation(id) {
  if (state.streaming && state.streaming.conversation.id === id) state.streaming.controller.abort();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.currentId === id) state.currentId = "";
  saveConversations();
  renderList();
  renderConversation();
}

// ---- Errors and the API key.

function showError(text) {
  const box = $("error");
  box.textContent = text;
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

function apiHeaders() {
  const headers = { "Content-Type": "application/json" };
  const key = localStorage.getItem(kApiKeyKey) || "";
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

// The message of the server's error object ({"error": {"message"}}), or the HTTP status.
async function errorMessage(response) {
  const body = await response.text().catch(() => "");
  try {
    const message = JSON.parse(body).error.message;
    if (typeof message === "string" && message) return message;
  } catch {}
  return "the server answered HTTP " + response.status + (body ? ": " + body.slice(0, 300) : "");
}

function askForKey(message) {
  $("key-message").textContent = message;
  $("key-panel").hidden = false;
  $("api-key").focus();
}

// Shows the model's id, or asks for the key when the server wants one.
async function checkServer() {
  try {
    const response = await fetch("v1/models", { headers: apiHeaders() });
    if (response.status === 401) {
      askForKey(await errorMessage(response));
      return;
    }
    if (!response.ok) {
      showError(await errorMessage(response));
      return;
    }
    $("key-panel").hidden = true;
    const models = await response.json();
    const id = models && models.data && models.data[0] && models.data[0].id;
    if (typeof id === "string") $("model-name").textContent = id;
  } catch (error) {
    showError("cannot reach the server: " + error.message);
  }
}

// ---- Settings.

function readSettings() {
  const stored = readJson(kSettingsKey, {});
  return stored && typeof stored === "object" ? stored : {};
}

function buildSettings() {
  const settings = readSettings();
  const box = $("sampler-fields");
  for (const field of kSamplerFields) {
    const label = el("label", "", field.label + " ");
    const input = el("input");
    input.id = "setting-" + field.name;
    input.type = "number";
    input.step = field.step;
    if (field.min !== undefined) input.min = field.min;
    if (field.max !== undefined) input.max = field.max;
    input.value = asText(settings[field.name]);
    input.addEventListener("input", saveSettings);
    label.append(input);
    box.append(label);
  }
  $("setting-system").value = asText(settings.system);
  $("setting-system").addEventListener("input", saveSettings);
  $("settings-reset").addEventListener("click", () => {
    for (const field of kSamplerFields) $("setting-" + field.name).value = "";
    $("setting-system").value = "";
    saveSettings();
  });
}

function saveSettings() {
  const settings = { system: $("setting-system").value };
  for (const field of kSamplerFields) settings[field.name] = $("setting-" + field.name).value;
  localStorage.setItem(kSettingsKey, JSON.stringify(settings));
}

// The request's sampler fields; the server checks the ranges and answers 400 naming a bad one.
function samplerFields() {
  const fields = {};
  for (const field of kSamplerFields) {
    const text = $("setting-" + field.name).value.trim();
    if (text === "") continue;
    const value = field.kind === "int" ? parseInt(text, 10) : parseFloat(text);
    if (!Number.isNaN(value)) fields[field.name] = value;
  }
  return fields;
}

// ---- Sending and streaming.

function setStreaming(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
}

// Reads Server-Sent Events from `response`, calling onEvent with each data: payload parsed.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data === "") continue;  // a keep-alive comment
      if (data === "[DONE]") return;
      onEvent(JSON.parse(data));
    }
  }
}

async function send(text) {
  if (state.streaming) return;
  clearError();
  let conversation = current();
  if (!conversation) {
    conversation = { id: newId(), title: text.slice(0, 60).split("\n")[0] || "Conversation", updated: 0, messages: [] };
    state.conversations.unshift(conversation);
    state.currentId = conversation.id;
  }
  const user = { role: "user", content: text, reasoning: "", finish: "", stats: null };
  const reply = { role: "assistant", content: "", reasoning: "", finish: "", stats: null };
  conversation.messages.push(user, reply);
  conversation.updated = Date.now();
  state.conversations.sort((a, b) => b.updated - a.updated);
  const controller = new AbortController();
  state.streaming = { conversation, message: reply, controller, view: null };
  renderList();
  renderConversation();
  setStreaming(true);

  const messages = [];
  const system = $("setting-system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const message of conversation.messages) {
    if (message !== reply) messages.push({ role: message.role, content: message.content });
  }
  const body = { messages, stream: true, stream_options: { include_usage: true }, ...samplerFields() };

  // tokens/s from the stream: the tokens after the first over the time since the first, so the
  // prompt's prefill is not counted. The server's usage gives the count at the end; until then
  // (and for a stopped reply, which gets none) each chunk counts as a token.
  let chunks = 0, usageTokens = 0, firstAt = 0, lastAt = 0;
  const updateStats = () => {
    const tokens = usageTokens || chunks;
    const seconds = (lastAt - firstAt) / 1000;
    reply.stats = { tokens, seconds, rate: tokens > 1 && seconds > 0 ? (tokens - 1) / seconds : 0 };
  };
  let drawPending = false;
  const draw = () => {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => {
      drawPending = false;
      const view = state.streaming && state.streaming.message === reply ? state.streaming.view : null;
      if (!view) return;
      const box = $("messages");
      const follow = nearBottom(box);
      view.update(true);
      if (follow) box.scrollTop = box.scrollHeight;
    });
  };

  let failed = false;
  try {
    const response = await fetch("v1/chat/completions", {
      method: "POST", headers: apiHeaders(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!response.ok) {
      failed = true;
      const message = await errorMessage(response);
      showError(message);
      if (response.status === 401) askForKey(message);
    } else {
      await readEvents(response, (event) => {
        if (event.error) {
          // An error after the stream began (the server cancelled the request).
          showError(asText(event.error.message) || "the reply ended with an error");
          reply.finish = "error";
          return;
        }
        if (event.usage && event.usage.completion_tokens) usageTokens = event.usage.completion_tokens;
        const choice = event.choices && event.choices[0];
        if (!choice) return;
        const delta = choice.delta || {};
        const piece = asText(delta.content) + asText(delta.reasoning_content);
        if (piece !== "") {
          const now = performance.now();
          if (!firstAt) firstAt = now;
          lastAt = now;
          ++chunks;
        }
        reply.content += asText(delta.content);
        reply.reasoning += asText(delta.reasoning_content);
        if (choice.finish_reason) reply.finish = choice.finish_reason;
        updateStats();
        draw();
      });
      updateStats();
    }
  } catch (error) {
    if (error.name === "AbortError") {
      reply.finish = "stopped";
    } else {
      failed = reply.content === "" && reply.reasoning === "";
      showError("the request failed: " + error.message);
    }
  }
  if (failed) {
    // Nothing came back: the message goes back to the box, to send again once fixed.
    conversation.messages.splice(conversation.messages.indexOf(user), 2);
    if (!$("prompt").value) $("prompt").value = text;
    if (conversation.messages.length === 0) {
      state.conversations = state.conversations.filter((c) => c !== conversation);
      if (state.currentId === conversation.id) state.currentId = "";
    }
  }
  state.streaming = null;
  setStreaming(false);
  saveConversations();
  renderList();
  renderConversation();
}

// ---- Wiring.

function start() {
  buildSettings();
  renderList();
  renderConversation();
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("prompt").value;
    if (text.trim() === "" || state.streaming) return;
    $("prompt").value = "";
    send(text);
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => {
    if (state.streaming) state.streaming.controller.abort();
  });
  $("new-chat").addEventListener("click", () => {
    state.currentId = "";
    saveConversations();
    renderList();
    renderConversation();
    $("prompt").focus();
  });
  $("settings-toggle").addEventListener("click", () => {
    $("settings").hidden = !$("settings").hidden;
  });
  $("key-toggle").addEventListener("click", () => {
    $("key-panel").hidden = !$("key-panel").hidden;
  });
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(kApiKeyKey, $("api-key").value);
    $("api-key").value = "";
    clearError();
    checkServer();
  });
  checkServer();
}

start();
