// Haul's dashboard: the daemon's JSON-RPC (aria2's methods and haul.*) from a signed-in page. The page never holds
// the secret: signing in gives a session cookie (HttpOnly) and a CSRF token, sent with every call. What changed is
// pushed over the WebSocket (haul.subscribe); lists are read a page at a time, searched and counted on the daemon.
// A daemon on a shared queue (haul daemon --db) is shown by fleet.js instead, which uses the calls and formats here.

const PAGE_SIZE = 50;
const CHART_SECONDS = 600;
const KEYS = ["gid", "status", "totalLength", "completedLength", "downloadSpeed", "connections", "files",
  "errorCode", "errorMessage", "dir"];

const view = {
  name: "downloads",
  state: "all",
  query: "",
  sort: "",
  offset: 0,
  total: 0,
  rows: new Map(), // gid -> {element, download}
  selected: new Set(),
};
// The CSRF token of the sign-in, kept in this origin's storage: no page of another origin reads it (another port is
// another origin, though the session cookie goes to every port of the host), and the daemon hands it out only once.
const CSRF_KEY = "haul.csrf";
let csrf = localStorage.getItem(CSRF_KEY) || "";

function keepToken(token) {
  csrf = token;
  if (token) localStorage.setItem(CSRF_KEY, token);
  else localStorage.removeItem(CSRF_KEY);
}
let speeds = [];
let refreshing = null;
let refreshAgain = false;
// The fleet's view when the daemon drives a shared queue: what refresh() reads, instead of the downloads.
let fleet = null;

export const $ = (id) => document.getElementById(id);

// MARK: - Calls

export class RPCError extends Error {}

// `fetch` of one of the daemon's own addresses; one it cannot reach (stopped or restarting) is an RPCError that says
// so: the page says it and goes on, and the WebSocket's reconnection brings it back.
async function reach(path, request) {
  try {
    return await fetch(path, { ...request, credentials: "same-origin" });
  } catch {
    throw new RPCError("the daemon cannot be reached");
  }
}

export async function call(method, ...params) {
  const response = await reach("/jsonrpc", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Haul-CSRF": csrf },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  if (!response.ok) throw new RPCError(`${method}: the daemon answered ${response.status}`);
  const answer = await response.json();
  if (answer.error) {
    if (answer.error.message === "Unauthorized") showSignIn("Signed out: sign in again.");
    throw new RPCError(answer.error.message);
  }
  return answer.result;
}

// Several calls in one request; each result or error in order.
export async function calls(list) {
  if (list.length === 0) return [];
  const results = await call("system.multicall", list.map(([methodName, ...params]) => ({ methodName, params })));
  if (results.some((result) => !Array.isArray(result) && result.message === "Unauthorized")) {
    showSignIn("Signed out: sign in again.");
    throw new RPCError("Unauthorized");
  }
  return results.map((result) => (Array.isArray(result) ? { value: result[0] } : { error: result.message }));
}

// The value of one of `calls`' results, or its error thrown.
export function valueOf(result) {
  if (result.error !== undefined) throw new RPCError(result.error);
  return result.value;
}

// Waits for `work`, calls a button, a push or a timer started: one the daemon refused or could not take is said in
// the status line, and `work` comes to undefined. Every call's failure is taken here or by its caller's own catch:
// one left unhandled reaches the console, and Firefox logs it even when an unhandledrejection listener prevents it.
export async function said(work) {
  try {
    return await work;
  } catch (error) {
    if (!(error instanceof RPCError)) throw error;
    $("connection").textContent = error.message;
  }
}

// MARK: - Signing in

async function start() {
  const answer = await fetch("/session", { headers: { "X-Haul-CSRF": csrf }, credentials: "same-origin" });
  const session = await answer.json();
  if (session.signedIn) {
    showApp();
  } else {
    keepToken("");
    showSignIn();
  }
}

function showSignIn(message) {
  closeLive();
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").hidden = !message;
  $("signin-error").textContent = message || "";
  $("secret").focus();
}

$("signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const button = event.submitter;
  button.disabled = true;
  $("signin-error").hidden = true;
  try {
    let response;
    try {
      response = await fetch("/session", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ secret: $("secret").value }),
        credentials: "same-origin",
      });
    } catch {
      showSignIn("The daemon cannot be reached.");
      return;
    }
    // A refusal before the session is looked at (a request too large, a wrong Host) is said in plain text.
    const answer = await response.json().catch(() => ({ error: `The daemon answered ${response.status}.` }));
    if (!answer.signedIn) {
      showSignIn(answer.error === "wrong secret" ? "That is not the daemon's secret." : answer.error);
      return;
    }
    $("secret").value = "";
    keepToken(answer.csrf || "");
    showApp();
  } finally {
    button.disabled = false;
  }
});

$("signout").addEventListener("click", async () => {
  // The session lives on in the daemon until it is told: unreached, the page stays signed in and says why.
  if (!(await said(reach("/session", { method: "DELETE", headers: { "X-Haul-CSRF": csrf } })))) return;
  keepToken("");
  showSignIn();
});

async function showApp() {
  $("signin").hidden = true;
  $("app").hidden = false;
  let features = [];
  try {
    features = (await call("aria2.getVersion")).enabledFeatures || [];
  } catch (error) {
    $("connection").textContent = error.message;
  }
  if (features.includes("fleet")) {
    fleet = fleet || (await import("/fleet.js"));
    fleet.show();
    refresh();
    return;
  }
  openLive();
  said(loadLimits());
  refresh();
}

// MARK: - Live changes

let socket = null;
let reconnect = null;

function openLive() {
  closeLive();
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const current = new WebSocket(`${scheme}//${location.host}/jsonrpc?csrf=${encodeURIComponent(csrf)}`);
  socket = current;
  current.addEventListener("open", () => {
    $("connection").textContent = "";
    current.send(JSON.stringify({ jsonrpc: "2.0", id: "subscribe", method: "haul.subscribe",
      params: [{ interval: "500", keys: KEYS }] }));
    refresh();
  });
  current.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.method === "haul.onChange") {
      showStat(message.params[0].stat);
      refresh();
    } else if (message.id === "subscribe" && message.error) {
      $("connection").textContent = `live updates refused: ${message.error.message}`;
    }
  });
  current.addEventListener("close", () => {
    // Only the socket in use reconnects: one closed on purpose (signing out, replaced) stays closed.
    if (socket !== current || $("app").hidden) return;
    $("connection").textContent = "reconnecting…";
    reconnect = setTimeout(openLive, 2000);
  });
}

function closeLive() {
  clearTimeout(reconnect);
  if (socket) {
    const closing = socket;
    socket = null;
    closing.close();
  }
}

// MARK: - Formatting

export function bytes(value) {
  let number = Number(value);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let unit = 0;
  while (number >= 1024 && unit < units.length - 1) {
    number /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? number : number.toFixed(1)} ${units[unit]}`;
}

export function duration(seconds) {
  if (!Number.isFinite(seconds)) return "—";
  if (seconds < 60) return `${Math.ceil(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

function nameOf(download) {
  const file = download.files && download.files[0];
  if (file && file.path) return file.path.split("/").pop();
  const uri = file && file.uris && file.uris[0] ? file.uris[0].uri : "";
  try {
    return decodeURIComponent(new URL(uri).pathname.split("/").pop()) || uri;
  } catch {
    return uri || download.gid;
  }
}

// MARK: - Lists

const QUEUE_STATES = ["active", "waiting", "paused"];
const HISTORY_STATES = ["complete", "error", "removed"];

// The sort each list is asked for: the queue's and the history's own names for one choice of the page's.
const SORTS = {
  "": ["position", "newest"],
  name: ["name", "path"],
  "-name": ["-name", "-path"],
  "-size": ["-size", "-size"],
  size: ["size", "size"],
  "-progress": ["-progress", "newest"],
};

// The current page of the current tab: from the queue, the history, or both one after the other; searched,
// sorted and counted on the daemon.
async function readPage() {
  const [queueSort, historySort] = SORTS[view.sort];
  const filter = view.query ? { query: view.query } : {};
  const queueFilter = { ...filter, sort: queueSort };
  const historyFilter = { ...filter, sort: historySort };
  if (QUEUE_STATES.includes(view.state)) {
    const page = await call("haul.tellQueue", view.offset, PAGE_SIZE, { ...queueFilter, status: [view.state] }, KEYS);
    return { total: Number(page.total), downloads: page.downloads };
  }
  if (HISTORY_STATES.includes(view.state)) {
    const page = await call(
      "haul.tellHistory", view.offset, PAGE_SIZE, { ...historyFilter, status: [view.state] }, KEYS);
    return { total: Number(page.total), downloads: page.downloads };
  }
  const counts = (await calls([["haul.tellQueue", 0, 0, filter], ["haul.tellHistory", 0, 0, filter]])).map(valueOf);
  const queued = Number(counts[0].total);
  const stopped = Number(counts[1].total);
  const wanted = [];
  if (view.offset < queued) wanted.push(["haul.tellQueue", view.offset, PAGE_SIZE, queueFilter, KEYS]);
  const fromHistory = Math.max(0, view.offset - queued);
  const left = PAGE_SIZE - Math.max(0, Math.min(PAGE_SIZE, queued - view.offset));
  if (left > 0) wanted.push(["haul.tellHistory", fromHistory, left, historyFilter, KEYS]);
  const pages = (await calls(wanted)).map(valueOf);
  return { total: queued + stopped, downloads: pages.flatMap((page) => page.downloads) };
}

// Reads what is shown again: one read at a time, one more after it when asked for meanwhile.
export function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = said(readShown()).finally(() => {
    refreshing = null;
    if (refreshAgain) {
      refreshAgain = false;
      refresh();
    }
  });
  return refreshing;
}

async function readShown() {
  if (fleet) await fleet.read();
  else if (view.name === "hosts") await showHosts();
  else await showPage(await readPage());
  showStat(await call("aria2.getGlobalStat"));
}

// Where a page of `size` rows starting at `offset` should start when `total` rows are left: at the last page that has
// any, when the rows it showed went (removed, or moved to another state) and left it past the end.
export function pageStart(offset, total, size) {
  return offset >= total && offset > 0 ? Math.max(0, Math.floor((total - 1) / size) * size) : offset;
}

function showPage(page) {
  view.total = page.total;
  if (pageStart(view.offset, page.total, PAGE_SIZE) !== view.offset) {
    view.offset = pageStart(view.offset, page.total, PAGE_SIZE);
    refreshAgain = true;
  }
  const body = $("downloads").tBodies[0];
  const shown = new Set();
  page.downloads.forEach((download, index) => {
    shown.add(download.gid);
    let row = view.rows.get(download.gid);
    if (!row) {
      row = { element: makeRow(download.gid) };
      view.rows.set(download.gid, row);
    }
    row.download = download;
    fillRow(row.element, download);
    if (body.children[index] !== row.element) body.insertBefore(row.element, body.children[index] || null);
  });
  for (const [gid, row] of view.rows) {
    if (shown.has(gid)) continue;
    row.element.remove();
    view.rows.delete(gid);
  }
  for (const gid of view.selected) if (!shown.has(gid)) view.selected.delete(gid);
  $("empty").hidden = page.downloads.length > 0;
  const last = Math.min(view.offset + PAGE_SIZE, page.total);
  $("range").textContent = page.total ? `${view.offset + 1}–${last} of ${page.total}` : "";
  $("previous").disabled = view.offset === 0;
  $("next").disabled = last >= page.total;
  showSelection();
}

function makeRow(gid) {
  const row = document.createElement("tr");
  row.dataset.gid = gid;
  row.innerHTML = `
    <td><input type="checkbox" class="select"></td>
    <td class="name"><button type="button" class="link detail"></button><span class="status"></span></td>
    <td><div class="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100"><div></div></div></td>
    <td class="number size"></td>
    <td class="number speed"></td>
    <td class="number left"></td>
    <td class="number connections"></td>
    <td class="actions"></td>`;
  row.querySelector(".select").setAttribute("aria-label", `Select ${gid}`);
  return row;
}

function fillRow(row, download) {
  const total = Number(download.totalLength);
  const done = Number(download.completedLength);
  const speed = Number(download.downloadSpeed);
  const percent = download.status === "complete" ? 100 : total > 0 ? Math.floor((done / total) * 100) : 0;
  const name = nameOf(download);
  row.className = download.status;
  row.querySelector(".select").checked = view.selected.has(download.gid);
  row.querySelector(".detail").textContent = name;
  row.querySelector(".status").textContent = download.status;
  const bar = row.querySelector(".bar");
  bar.setAttribute("aria-valuenow", String(percent));
  bar.setAttribute("aria-label", `${name}: ${percent}%`);
  bar.title = download.errorMessage || `${percent}%`;
  bar.firstElementChild.style.width = `${percent}%`;
  row.querySelector(".size").textContent = total > 0 ? `${bytes(done)} / ${bytes(total)}` : bytes(done);
  row.querySelector(".speed").textContent = download.status === "active" ? `${bytes(speed)}/s` : "";
  row.querySelector(".left").textContent =
    download.status === "active" && total > 0 ? duration(speed > 0 ? (total - done) / speed : Infinity) : "";
  row.querySelector(".connections").textContent = download.status === "active" ? download.connections : "";
  const actions = row.querySelector(".actions");
  const wanted = actionsFor(download.status);
  if (actions.dataset.shown !== wanted.join()) {
    actions.dataset.shown = wanted.join();
    actions.replaceChildren(...wanted.map((action) => {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.action = action;
      button.textContent = ACTION_NAMES[action];
      button.setAttribute("aria-label", `${ACTION_NAMES[action]} ${name}`);
      return button;
    }));
  } else {
    for (const button of actions.children) button.setAttribute("aria-label", `${ACTION_NAMES[button.dataset.action]} ${name}`);
  }
}

const ACTION_NAMES = { pause: "Pause", resume: "Resume", up: "Up", down: "Down", retry: "Retry", remove: "Remove" };

function actionsFor(status) {
  switch (status) {
    case "active": return ["pause", "remove"];
    case "waiting": return ["pause", "up", "down", "remove"];
    case "paused": return ["resume", "up", "down", "remove"];
    case "error": return ["retry", "remove"];
    default: return ["remove"];
  }
}

// The calls that do `action` to `download` (a retry adds it again with its sources and options, and drops the
// failed result).
async function actionCalls(action, download) {
  const gid = download.gid;
  switch (action) {
    case "pause": return download.status === "paused" ? [] : [["aria2.pause", gid]];
    case "resume": return download.status === "paused" ? [["aria2.unpause", gid]] : [];
    case "up": return [["aria2.changePosition", gid, -1, "POS_CUR"]];
    case "down": return [["aria2.changePosition", gid, 1, "POS_CUR"]];
    case "remove":
      return HISTORY_STATES.includes(download.status) ? [["aria2.removeDownloadResult", gid]] : [["aria2.remove", gid]];
    case "retry": {
      if (download.status !== "error") return [];
      const [uris, options] = await Promise.all([call("aria2.getUris", gid), call("aria2.getOption", gid)]);
      const kept = {};
      for (const name of ["dir", "out", "split", "max-download-limit", "checksum", "header", "max-connection-per-server"]) {
        if (options[name] !== undefined && options[name] !== "") kept[name] = options[name];
      }
      return [["aria2.addUri", [...new Set(uris.map((entry) => entry.uri))], kept], ["aria2.removeDownloadResult", gid]];
    }
    default: return [];
  }
}

async function perform(action, downloads) {
  const list = (await Promise.all(downloads.map((download) => actionCalls(action, download)))).flat();
  const results = await calls(list);
  const failed = results.filter((result) => result.error);
  $("connection").textContent = failed.length ? `${ACTION_NAMES[action]}: ${failed[0].error}` : "";
  await refresh();
}

$("downloads").addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-gid]");
  if (!row) return;
  const download = view.rows.get(row.dataset.gid).download;
  if (event.target.matches("button[data-action]")) said(perform(event.target.dataset.action, [download]));
  else if (event.target.matches("button.detail")) said(showDetail(download.gid));
  else if (event.target.matches("input.select")) {
    if (event.target.checked) view.selected.add(download.gid);
    else view.selected.delete(download.gid);
    showSelection();
  }
});

$("select-all").addEventListener("change", (event) => {
  for (const gid of view.rows.keys()) {
    if (event.target.checked) view.selected.add(gid);
    else view.selected.delete(gid);
  }
  for (const row of view.rows.values()) row.element.querySelector(".select").checked = event.target.checked;
  showSelection();
});

function showSelection() {
  const count = view.selected.size;
  $("selected-count").textContent = count ? `${count} selected` : "None selected";
  for (const button of document.querySelectorAll("#bulk button")) button.disabled = count === 0;
  $("select-all").checked = count > 0 && count === view.rows.size;
}

$("bulk").addEventListener("click", async (event) => {
  const action = event.target.dataset.bulk;
  if (!action) return;
  const downloads = [...view.selected].map((gid) => view.rows.get(gid)).filter(Boolean).map((row) => row.download);
  view.selected.clear();
  await said(perform(action, downloads));
});

// A tablist as a keyboard expects it: one stop for Tab, the arrows (and Home, End) moving between the tabs, each tab
// chosen by click or key selected and its `data-state` handed to `select`.
export function tabList(list, select) {
  const choose = (tab) => {
    for (const other of list.children) {
      other.setAttribute("aria-selected", String(other === tab));
      other.tabIndex = other === tab ? 0 : -1;
    }
    select(tab.dataset.state);
  };
  list.addEventListener("click", (event) => {
    if (event.target.dataset.state) choose(event.target);
  });
  list.addEventListener("keydown", (event) => {
    const tabs = [...list.children];
    const index = tabs.indexOf(document.activeElement);
    if (index < 0) return;
    const next = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: tabs.length - 1 }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    const tab = tabs[(next + tabs.length) % tabs.length];
    tab.focus();
    choose(tab);
  });
  for (const tab of list.children) tab.tabIndex = tab.getAttribute("aria-selected") === "true" ? 0 : -1;
}

tabList($("states"), (state) => {
  view.state = state;
  view.offset = 0;
  refresh();
});

let searchTimer = null;
$("search").addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    view.query = $("search").value.trim();
    view.offset = 0;
    refresh();
  }, 200);
});

$("sort").addEventListener("change", () => {
  view.sort = $("sort").value;
  view.offset = 0;
  refresh();
});

$("previous").addEventListener("click", () => {
  view.offset = Math.max(0, view.offset - PAGE_SIZE);
  refresh();
});
$("next").addEventListener("click", () => {
  if (view.offset + PAGE_SIZE < view.total) view.offset += PAGE_SIZE;
  refresh();
});

// MARK: - Views

document.querySelector("nav").addEventListener("click", (event) => {
  const name = event.target.dataset.view;
  if (!name) return;
  for (const button of document.querySelectorAll("nav button")) {
    if (button === event.target) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  view.name = name;
  $("downloads-view").hidden = name !== "downloads";
  $("hosts-view").hidden = name !== "hosts";
  refresh();
});

async function showHosts() {
  const hosts = await call("haul.getHosts");
  const body = $("hosts").tBodies[0];
  const editing = body.contains(document.activeElement) && document.activeElement.matches("input");
  if (editing) return; // the table is not redrawn under a limit being typed
  body.replaceChildren(...hosts.map((host) => {
    const row = document.createElement("tr");
    row.dataset.host = host.host;
    row.innerHTML = `
      <td class="host"></td><td class="number waiting"></td><td class="number running"></td>
      <td class="number speed"></td><td class="number oldest"></td>
      <td><form class="host-limit"><input type="number" min="1" class="limit" placeholder="none">
        <button type="submit">Set</button></form></td>
      <td><button type="button" class="pause-host"></button></td>`;
    row.querySelector(".host").textContent = host.host;
    row.querySelector(".waiting").textContent = host.numWaiting;
    row.querySelector(".running").textContent =
      host.maxConnections ? `${host.numActive} of ${host.maxConnections}` : host.numActive;
    row.querySelector(".speed").textContent = `${bytes(host.downloadSpeed)}/s`;
    row.querySelector(".oldest").textContent = Number(host.numWaiting) > 0 ? duration(Number(host.oldestWait)) : "";
    const limit = row.querySelector(".limit");
    limit.value = host.ownLimit === "true" ? host.maxConnections : "";
    limit.setAttribute("aria-label", `Limit for ${host.host}`);
    const pause = row.querySelector(".pause-host");
    pause.textContent = host.paused === "true" ? "Resume host" : "Pause host";
    pause.dataset.paused = host.paused;
    pause.setAttribute("aria-label", `${pause.textContent} ${host.host}`);
    return row;
  }));
  $("hosts-empty").hidden = hosts.length > 0;
}

$("hosts").addEventListener("submit", async (event) => {
  event.preventDefault();
  const row = event.target.closest("tr");
  try {
    await call("haul.changeHostOption", row.dataset.host, { "max-connections": row.querySelector(".limit").value });
    $("connection").textContent = "";
  } catch (error) {
    $("connection").textContent = error.message;
  }
  document.activeElement.blur();
  refresh();
});

$("hosts").addEventListener("click", async (event) => {
  if (!event.target.matches(".pause-host")) return;
  const host = event.target.closest("tr").dataset.host;
  await said(call(event.target.dataset.paused === "true" ? "haul.unpauseHost" : "haul.pauseHost", host));
  refresh();
});

// MARK: - Speed and limits

function showStat(stat) {
  $("speed").textContent = `↓ ${bytes(stat.downloadSpeed)}/s`;
  $("counts").textContent =
    `${stat.numActive} active · ${stat.numWaiting} waiting · ${stat.numStoppedTotal || stat.numStopped} stopped`;
  lastStat = stat;
  lastStatTime = Date.now();
}

let lastStat = null;
let lastStatTime = 0;

// One point a second. Pushes come only when something changed: with none for two seconds, the stat is read.
setInterval(async () => {
  if ($("app").hidden || fleet) return;
  if (Date.now() - lastStatTime > 2000) {
    try {
      showStat(await call("aria2.getGlobalStat"));
    } catch {
      return;
    }
  }
  speeds.push(lastStat ? Number(lastStat.downloadSpeed) : 0);
  if (speeds.length > CHART_SECONDS) speeds = speeds.slice(-CHART_SECONDS);
  drawChart();
}, 1000);

function drawChart() {
  const canvas = $("chart");
  const context = canvas.getContext("2d");
  const style = getComputedStyle(canvas);
  context.clearRect(0, 0, canvas.width, canvas.height);
  const top = Math.max(1, ...speeds);
  context.strokeStyle = style.getPropertyValue("--accent");
  context.lineWidth = 2;
  context.beginPath();
  speeds.forEach((speed, index) => {
    const x = canvas.width - (speeds.length - 1 - index) * (canvas.width / CHART_SECONDS);
    const y = canvas.height - 4 - (speed / top) * (canvas.height - 8);
    if (index === 0) context.moveTo(x, y);
    else context.lineTo(x, y);
  });
  context.stroke();
  context.fillStyle = style.getPropertyValue("color");
  context.fillText(`${bytes(top)}/s`, 4, 12);
}

async function loadLimits() {
  const options = await call("aria2.getGlobalOption");
  $("max-concurrent").value = options["max-concurrent-downloads"];
  $("max-overall").value = options["max-overall-download-limit"] === "0" ? "" : options["max-overall-download-limit"];
}

$("limits").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await call("aria2.changeGlobalOption", {
      "max-concurrent-downloads": $("max-concurrent").value,
      "max-overall-download-limit": $("max-overall").value.trim() || "0",
    });
    $("limits-message").textContent = "Saved.";
  } catch (error) {
    $("limits-message").textContent = error.message;
  }
});

// MARK: - Adding

$("add-open").addEventListener("click", () => {
  $("add-error").hidden = true;
  $("add-dialog").showModal();
  $("add-urls").focus();
});
$("add-cancel").addEventListener("click", () => $("add-dialog").close());

$("add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const lines = $("add-urls").value.split("\n").map((line) => line.trim()).filter(Boolean);
  const options = {};
  const field = (id, name) => {
    const value = $(id).value.trim();
    if (value) options[name] = value;
  };
  field("add-dir", "dir");
  field("add-split", "split");
  field("add-limit", "max-download-limit");
  field("add-checksum", "checksum");
  if (lines.length === 1) field("add-out", "out");
  else if ($("add-out").value.trim()) return showAddError("A file name applies to one URL line only.");
  const headers = $("add-headers").value.split("\n").map((line) => line.trim()).filter(Boolean);
  if (headers.length) options.header = headers;
  try {
    const results = await calls(lines.map((line) => ["aria2.addUri", line.split(/\s+/), options]));
    const failed = results.map((result, index) => [result, lines[index]]).filter(([result]) => result.error);
    if (failed.length) {
      showAddError(failed.map(([result, line]) => `${line}: ${result.error}`).join("\n"));
      // The lines that were added leave the box; the refused ones stay to be mended.
      $("add-urls").value = failed.map(([, line]) => line).join("\n");
    } else {
      $("add-form").reset();
      $("add-dialog").close();
    }
  } catch (error) {
    showAddError(error.message);
  }
  refresh();
});

export function showAddError(message) {
  $("add-error").textContent = message;
  $("add-error").hidden = false;
}

// MARK: - A download's detail

async function showDetail(gid) {
  const [status, uris, detail] = await Promise.all([
    call("aria2.tellStatus", gid), call("aria2.getUris", gid), call("haul.tellDetail", gid)]);
  $("detail-title").textContent = nameOf(status);
  const facts = [
    ["Status", status.status],
    ["GID", status.gid],
    ["Directory", status.dir],
    ["File", status.files && status.files[0] ? status.files[0].path : ""],
    ["Size", `${bytes(status.completedLength)} of ${bytes(status.totalLength)}`],
    ["Connections", status.connections],
  ];
  if (status.errorMessage) facts.push(["Error", status.errorMessage]);
  $("detail").replaceChildren(...facts.flatMap(([term, value]) => {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value || "—";
    return [dt, dd];
  }));
  const served = new Set(detail.servedBy);
  $("detail-uris").replaceChildren(...uris.map((entry) => {
    const item = document.createElement("li");
    const role = served.has(entry.uri) ? "sent bytes of the file" : entry.status === "used" ? "in use" : "a mirror";
    item.textContent = `${entry.uri} (${role})`;
    return item;
  }));
  for (const uri of detail.servedBy) {
    if (uris.some((entry) => entry.uri === uri)) continue;
    const item = document.createElement("li");
    item.textContent = `${uri} (sent bytes of the file, reached by a redirect)`;
    $("detail-uris").append(item);
  }
  $("detail-segments-section").hidden = detail.segments.length === 0;
  $("detail-segments").tBodies[0].replaceChildren(...detail.segments.map((segment) => {
    const row = document.createElement("tr");
    for (const [text, number] of [[segment.connection, true], [`${segment.from}–${Number(segment.to) - 1}`, true],
      [segment.uri, false], [segment.state, false]]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      if (number) cell.className = "number";
      row.append(cell);
    }
    return row;
  }));
  $("detail-no-events").hidden = detail.events.length > 0;
  $("detail-events").replaceChildren(...detail.events.map((event) => {
    const item = document.createElement("li");
    const time = document.createElement("time");
    time.dateTime = new Date(Number(event.time)).toISOString();
    time.textContent = new Date(Number(event.time)).toLocaleTimeString();
    item.append(time, ` ${event.kind}: ${event.message}`);
    return item;
  }));
  $("detail-dialog").showModal();
}
$("detail-close").addEventListener("click", () => $("detail-dialog").close());

start();
