// Drives `petrel serve`'s chat page in headless chromium (puppeteer-core) the way a person
// would, and writes what it saw as JSON for tests/webui_test.cc to check:
//   the API key prompt, a greedy reply streamed into the page with its tokens/s, a long reply
//   stopped mid-stream, a 400 shown with the server's message, the conversation found again
//   after a reload, and a stored conversation full of HTML shown as text.
// Usage: node chat.mjs PORT OUT CHROMIUM SCREENSHOT API_KEY
// Run from a folder where npm put puppeteer-core (tests/util/openai_client.h).
import { createRequire } from "node:module";
import { writeFileSync } from "node:fs";

const require = createRequire(process.cwd() + "/");
const puppeteer = require("puppeteer-core");

const [port, out, chromium, screenshot, apiKey] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}/`;
const kWait = { timeout: 90000 };
const result = { steps: [] };
const step = (name) => {
  result.steps.push(name);
  console.log("step:", name);
};

// The hostile text: every place model or stored text reaches the page gets some.
const kScript = "<script>window.__xss = 1</script>";
const kImg = '<img src=x onerror="window.__xss = 2">';
const kHostile = {
  id: "hostile",
  title: `${kImg} title`,
  updated: Date.now() + 100000,
  messages: [
    { role: "user", content: `${kScript} ${kImg}` },
    {
      role: "assistant",
      reasoning: `thinking ${kImg}`,
      // Stored figures of the wrong type are dropped, not rendered or called.
      stats: { tokens: kImg, seconds: "1", rate: "5" },
      finish: kImg,
      content:
        `${kScript}\n\n${kImg}\n\n**bold ${kImg}** and \`code ${kScript}\`\n\n` +
        "- one\n- two\n\n1. first\n2. second\n\n```html\n" + kScript + "\n```\nafter",
    },
  ],
};

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 800 });
  const consoleErrors = [];
  page.on("pageerror", (error) => consoleErrors.push(String(error)));
  // Counted from before the page's own script runs: a blocked inline script or handler would
  // show up here even though the policy stopped it.
  await page.evaluateOnNewDocument(() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__violations.push(event.violatedDirective + " " + event.blockedURI);
    });
  });

  const text = (selector) => page.$eval(selector, (node) => node.textContent);
  const assistants = () =>
    page.$$eval('#messages .message[data-role="assistant"]', (nodes) =>
      nodes.map((node) => ({
        state: node.dataset.state,
        content: node.querySelector(".content").textContent,
        stats: node.querySelector(".stats").textContent,
      })));
  const setField = async (selector, value) => {
    await page.click(selector, { clickCount: 3 });
    await page.keyboard.press("Backspace");
    if (value !== "") await page.type(selector, value);
  };
  const sendMessage = async (message) => {
    await page.type("#prompt", message);
    await page.keyboard.press("Enter");
  };

  step("open");
  await page.goto(base, { waitUntil: "load" });
  await page.waitForSelector("#key-panel:not([hidden])", kWait);
  result.key_prompt = await text("#key-message");
  await page.type("#api-key", apiKey);
  await page.click('#key-form button[type="submit"]');
  await page.waitForSelector("#key-panel[hidden]", kWait);
  await page.waitForFunction(() => document.getElementById("model-name").textContent !== "petrel", kWait);
  result.model_name = await text("#model-name");

  step("greedy reply");
  await page.click("#settings-toggle");
  await setField("#setting-temperature", "0");
  await setField("#setting-max_tokens", "24");
  await sendMessage("Once upon a time");
  await page.waitForSelector('#messages .message[data-role="assistant"][data-state="stop"], ' +
                            '#messages .message[data-role="assistant"][data-state="length"]', kWait);
  result.first = (await assistants())[0];

  step("stop mid-stream");
  await setField("#setting-max_tokens", "400");
  await sendMessage("Continue");
  await page.waitForFunction(() => {
    const replies = document.querySelectorAll('#messages .message[data-role="assistant"]');
    const last = replies[replies.length - 1];
    return replies.length === 2 && last.dataset.state === "streaming" &&
           last.querySelector(".content").textContent.length >= 4;
  }, kWait);
  result.stop_visible = await page.$eval("#stop", (node) => !node.hidden);
  await page.click("#stop");
  await page.waitForSelector("#send:not([hidden])", kWait);
  const stopped = (await assistants())[1];
  // Nothing more may arrive once stopped.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  result.stopped = stopped;
  result.stopped_later = (await assistants())[1];
  // The server cancels the request when the page drops the connection.
  const started = Date.now();
  result.running_after_stop = -1;
  while (Date.now() - started < 10000) {
    const metrics = await (await fetch(base + "metrics", { headers: { Authorization: `Bearer ${apiKey}` } })).text();
    const match = metrics.match(/^petrel_running_sequences (\d+)/m);
    result.running_after_stop = match ? Number(match[1]) : -1;
    if (result.running_after_stop === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  result.stop_cancel_ms = Date.now() - started;
  await page.screenshot({ path: screenshot, fullPage: true });

  step("error from the server");
  await setField("#setting-top_p", "5");
  await sendMessage("This one is refused");
  await page.waitForSelector("#error:not([hidden])", kWait);
  result.error = await text("#error");
  result.prompt_after_error = await page.$eval("#prompt", (node) => node.value);
  result.replies_after_error = (await assistants()).length;
  await setField("#setting-top_p", "");
  await setField("#prompt", "");

  step("reload");
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector("#conversations li", kWait);
  result.titles = await page.$$eval("#conversations li .open", (nodes) => nodes.map((node) => node.textContent));
  await page.click("#new-chat");
  result.after_new_chat = await page.$$eval("#messages .message", (nodes) => nodes.length);
  const opened = await page.$$("#conversations li .open");
  await opened[0].click();
  await page.waitForSelector('#messages .message[data-role="assistant"]', kWait);
  result.reloaded = await assistants();
  result.reloaded_users = await page.$$eval('#messages .message[data-role="user"] .content',
                                            (nodes) => nodes.map((node) => node.textContent));
  result.settings_kept = await page.$eval("#setting-max_tokens", (node) => node.value);

  step("hostile stored conversation");
  await page.evaluate((hostile) => {
    const stored = JSON.parse(localStorage.getItem("petrel.conversations") || "[]");
    stored.push(hostile);
    localStorage.setItem("petrel.conversations", JSON.stringify(stored));
    localStorage.setItem("petrel.current", hostile.id);
  }, kHostile);
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector('#messages .message[data-role="assistant"]', kWait);
  // Give any injected handler (an <img> failing to load) the time to fire.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  result.hostile = await page.evaluate(() => {
    const assistant = document.querySelector('#messages .message[data-role="assistant"]');
    const details = assistant.querySelector("details.reasoning");
    return {
      xss: window.__xss === undefined ? null : window.__xss,
      violations: window.__violations,
      injected_elements: document.querySelectorAll("#messages script, #messages img, #conversations img, " +
                                                   "#messages [onerror], #conversations [onerror]").length,
      user: document.querySelector('#messages .message[data-role="user"] .content').textContent,
      title: document.querySelector("#conversations li.current .open").textContent,
      content: assistant.querySelector(".content").textContent,
      stats: assistant.querySelector(".stats").textContent,
      paragraphs: [...assistant.querySelectorAll(".content > p")].map((node) => node.textContent),
      strong: [...assistant.querySelectorAll(".content strong")].map((node) => node.textContent),
      code: [...assistant.querySelectorAll(".content p code")].map((node) => node.textContent),
      bullets: [...assistant.querySelectorAll(".content ul > li")].map((node) => node.textContent),
      numbered: [...assistant.querySelectorAll(".content ol > li")].map((node) => node.textContent),
      block: [...assistant.querySelectorAll(".content pre > code")].map((node) => node.textContent),
      block_lang: [...assistant.querySelectorAll(".content pre > code")].map((node) => node.dataset.lang || ""),
      reasoning_present: details !== null && !details.hidden,
      reasoning_open: details !== null && details.open,
      reasoning: details ? details.querySelector(".reasoning-body").textContent : "",
    };
  });
  result.page_errors = consoleErrors;
  step("done");
} finally {
  await browser.close();
}
writeFileSync(out, JSON.stringify(result, null, 1));
