// The fleet's view, for a daemon that drives a PostgreSQL shared queue (haul daemon --db): its workers with their
// leases, the hosts across the fleet, the queue's throughput over ten minutes, and its downloads by state with
// pause, resume, retry and remove, one by one or for a selection. Everything comes from the database through the
// daemon (haul.fleet, haul.fleetDownloads), read every two seconds while the page is shown: a summary and one page
// of fifty, whatever the queue holds.

import { $, bytes, call, calls, duration, pageStart, refresh, RPCError, said, tabList } from "/app.js";

const PAGE_SIZE = 50;
const view = { state: "active", offset: 0, total: 0, rows: new Map(), selected: new Set() };
let timer = null;

// Shows the fleet's view in place of the downloads of a daemon of its own.
export function show() {
  for (const id of ["global", "downloads-view", "hosts-view"]) $(id).hidden = true;
  document.querySelector("header nav").hidden = true;
  $("fleet-view").hidden = false;
  $("add-dir").placeholder = "under each worker's directory";
  clearInterval(timer);
  timer = setInterval(() => {
    if (!$("app").hidden) refresh();
  }, 2000);
}

// Reads the fleet's summary and the page of downloads shown, and shows them.
export async function read() {
  let [overview, page] = await Promise.all([
    call("haul.fleet"), call("haul.fleetDownloads", view.state, view.offset, PAGE_SIZE)]);
  const start = pageStart(view.offset, Number(page.total), PAGE_SIZE);
  if (start !== view.offset) {
    view.offset = start;
    page = await call("haul.fleetDownloads", view.state, view.offset, PAGE_SIZE);
  }
  showOverview(overview);
  showDownloads(page);
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.append(td);
  return td;
}

function showOverview(fleet) {
  const counts = fleet.counts;
  $("fleet-summary").textContent =
    `${counts.running} running · ${counts.waiting} waiting · ${counts.paused} paused · ${counts.done} done · ` +
    `${counts.failed} failed · ${bytes(fleet.bytesDone)} published · ${bytes(fleet.bytesPerSecond)}/s ` +
    `over the last minute`;
  const limit = $("fleet-per-host");
  if (document.activeElement !== limit) limit.value = fleet.perHost === null ? "" : fleet.perHost;

  $("workers").tBodies[0].replaceChildren(...fleet.workers.map((worker) => {
    const row = document.createElement("tr");
    row.className = worker.state;
    row.dataset.name = worker.name;
    cell(row, worker.name, "name");
    cell(row, worker.machine || "—", "machine");
    cell(row, { active: "held", stopped: "stopped", lost: "lost: its downloads went back" }[worker.state] ||
      worker.state, "lease");
    cell(row, `${duration(worker.secondsSinceHeartbeat)} ago`, "number heartbeat");
    cell(row, String(worker.running), "number running");
    cell(row, String(worker.done), "number done");
    cell(row, worker.state === "active" ? `${bytes(worker.bytesPerSecond)}/s` : "", "number speed");
    return row;
  }));
  $("workers-empty").hidden = fleet.workers.length > 0;

  $("fleet-hosts").tBodies[0].replaceChildren(...fleet.hosts.map((host) => {
    const row = document.createElement("tr");
    row.dataset.host = host.host;
    cell(row, host.host, "host");
    cell(row, String(host.waiting), "number waiting");
    cell(row, host.limit === null ? String(host.running) : `${host.running} of ${host.limit}`, "number running");
    cell(row, String(host.done), "number done");
    cell(row, String(host.failed), "number failed");
    return row;
  }));
  drawThroughput(fleet.throughput);
}

function drawThroughput(samples) {
  const canvas = $("fleet-chart");
  const context = canvas.getContext("2d");
  const style = getComputedStyle(canvas);
  context.clearRect(0, 0, canvas.width, canvas.height);
  const rates = samples.map((sample) => Number(sample.bytes) / 10);
  const top = Math.max(1, ...rates);
  const step = canvas.width / Math.max(1, rates.length);
  context.fillStyle = style.getPropertyValue("--accent");
  rates.forEach((rate, index) => {
    const height = (rate / top) * (canvas.height - 16);
    context.fillRect(index * step + 1, canvas.height - height, Math.max(1, step - 2), height);
  });
  context.fillStyle = style.getPropertyValue("color");
  context.fillText(`${bytes(top)}/s`, 4, 12);
}

const ACTIONS = { pause: "Pause", resume: "Resume", retry: "Retry", remove: "Remove" };

function actionsFor(status) {
  switch (status) {
    case "active": return ["pause", "remove"];
    case "waiting": return ["pause", "remove"];
    case "paused": return ["resume", "remove"];
    case "error": case "removed": return ["retry"];
    default: return [];
  }
}

function showDownloads(page) {
  view.total = Number(page.total);
  const body = $("fleet-downloads").tBodies[0];
  view.rows.clear();
  body.replaceChildren(...page.downloads.map((download) => {
    view.rows.set(download.gid, download);
    const row = document.createElement("tr");
    row.dataset.gid = download.gid;
    row.className = download.status;
    const name = download.files[0].path;
    const select = document.createElement("input");
    select.type = "checkbox";
    select.className = "select";
    select.checked = view.selected.has(download.gid);
    select.setAttribute("aria-label", `Select ${name}`);
    cell(row, "").append(select);
    const file = cell(row, name, "name");
    const status = document.createElement("span");
    status.className = "status";
    status.textContent = download.pauseRequested ? "pausing at the worker's next heartbeat" :
      download.errorMessage && download.status !== "complete" ? `${download.status}: ${download.errorMessage}` :
        download.status;
    file.append(status);
    cell(row, download.worker || "—", "worker");
    cell(row, `${download.attempt} of ${download.maxAttempts}`, "number attempts");
    cell(row, download.status === "complete" ? bytes(download.totalLength) : "", "number size");
    const actions = cell(row, "", "actions");
    for (const action of actionsFor(download.status)) {
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.action = action;
      button.textContent = ACTIONS[action];
      button.setAttribute("aria-label", `${ACTIONS[action]} ${name}`);
      actions.append(button);
    }
    return row;
  }));
  for (const gid of view.selected) if (!view.rows.has(gid)) view.selected.delete(gid);
  $("fleet-empty").hidden = page.downloads.length > 0;
  const last = Math.min(view.offset + PAGE_SIZE, view.total);
  $("fleet-range").textContent = view.total ? `${view.offset + 1}–${last} of ${view.total}` : "";
  $("fleet-previous").disabled = view.offset === 0;
  $("fleet-next").disabled = last >= view.total;
  showSelection();
}

function showSelection() {
  const count = view.selected.size;
  $("fleet-selected-count").textContent = count ? `${count} selected` : "None selected";
  for (const button of document.querySelectorAll("#fleet-bulk button[data-bulk]")) button.disabled = count === 0;
  $("fleet-select-all").checked = count > 0 && count === view.rows.size;
}

// One call for every download acted on: the queue changes them in one statement.
async function perform(action, gids) {
  const method = { pause: "haul.fleetPause", resume: "haul.fleetResume", retry: "haul.fleetRetry",
    remove: "haul.fleetRemove" }[action];
  try {
    const changed = await call(method, gids);
    $("connection").textContent = changed < gids.length ?
      `${ACTIONS[action]}: ${gids.length - changed} of ${gids.length} could not be changed in their state` : "";
  } catch (error) {
    if (!(error instanceof RPCError)) throw error;
    $("connection").textContent = `${ACTIONS[action]}: ${error.message}`;
  }
  await refresh();
}

$("fleet-downloads").addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-gid]");
  if (!row) return;
  if (event.target.matches("button[data-action]")) perform(event.target.dataset.action, [row.dataset.gid]);
  else if (event.target.matches("input.select")) {
    if (event.target.checked) view.selected.add(row.dataset.gid);
    else view.selected.delete(row.dataset.gid);
    showSelection();
  }
});

$("fleet-select-all").addEventListener("change", (event) => {
  for (const gid of view.rows.keys()) {
    if (event.target.checked) view.selected.add(gid);
    else view.selected.delete(gid);
  }
  for (const box of document.querySelectorAll("#fleet-downloads input.select")) box.checked = event.target.checked;
  showSelection();
});

$("fleet-bulk").addEventListener("click", async (event) => {
  const action = event.target.dataset.bulk;
  if (!action) return;
  const gids = [...view.selected];
  view.selected.clear();
  await perform(action, gids);
});

$("fleet-retry-failed").addEventListener("click", async () => {
  const retried = await said(calls([["haul.fleetRetry"]]));
  if (retried) $("connection").textContent = retried[0].error ? `Retry: ${retried[0].error}` : "";
  await refresh();
});

tabList($("fleet-states"), (state) => {
  view.state = state;
  view.offset = 0;
  view.selected.clear();
  refresh();
});

$("fleet-previous").addEventListener("click", () => {
  view.offset = Math.max(0, view.offset - PAGE_SIZE);
  refresh();
});
$("fleet-next").addEventListener("click", () => {
  if (view.offset + PAGE_SIZE < view.total) view.offset += PAGE_SIZE;
  refresh();
});

$("fleet-limit").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await call("haul.changeFleet", { "per-host": $("fleet-per-host").value.trim() || "0" });
    $("fleet-limit-message").textContent = "Saved.";
  } catch (error) {
    if (!(error instanceof RPCError)) throw error;
    $("fleet-limit-message").textContent = error.message;
  }
  document.activeElement.blur();
  await refresh();
});
