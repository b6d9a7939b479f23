// The gpuplace dashboard: plain JavaScript over the service's REST API, no build step and no framework.
// Every value the service sends is put on the page as text (textContent), never parsed as HTML.
"use strict";

const KEY_ITEM = "gpuplace.apiKey";
const HISTORY_ITEM = "gpuplace.decisions";
const POLL_MS = 3000;
// the state generation (/readyz) tells when something changed; a view is read again at least this often
// regardless, for what changes without a new generation (times, the model's error)
const REFRESH_MS = 15000;
const LISTED = 500;
const HISTORY = 20;
const FINAL = new Set(["released", "completed", "evicted", "cancelled"]);
const VIEWS = ["cluster", "jobs", "queues", "model", "place"];
// the API lives beside /ui/: relative to the page, so that a path prefix in front of the service still works
const BASE = new URL("..", document.baseURI);

const state = {
  view: "cluster",
  machine: null,
  job: null,
  generation: null,
  seen: null,
  refreshedAt: 0,
  cluster: null,
  waiting: new Map(),
  events: null,
  eventsJob: null,
  timer: null,
  busy: false,
  again: false,
  policies: null,
};

// ---- small helpers -------------------------------------------------------------------------------

function $(selector, root = document) {
  return root.querySelector(selector);
}

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "text") el.textContent = value;
    else if (name === "style") for (const [p, v] of Object.entries(value)) el.style.setProperty(p, v);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function number(value, digits = 2) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (Number.isInteger(value)) return value.toLocaleString("en");
  return value.toLocaleString("en", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}

function share(milli) {
  return (milli / 1000).toFixed(2);
}

function when(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const date = new Date(seconds * 1000);
  const ago = Math.max(0, Math.round(Date.now() / 1000 - seconds));
  const span = ago < 90 ? `${ago} s ago` : ago < 5400 ? `${Math.round(ago / 60)} min ago` : `${(ago / 3600).toFixed(1)} h ago`;
  return `${date.toLocaleTimeString("en-GB")} (${span})`;
}

// FNV-1a, then mixed (MurmurHash3's finaliser): ids that differ in their last character (train-1, train-2)
// would otherwise get hues 179 degrees apart, every other job the same two colours
function hue(text) {
  let hash = 2166136261;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 16777619);
  hash = Math.imul(hash ^ (hash >>> 16), 0x85ebca6b);
  hash = Math.imul(hash ^ (hash >>> 13), 0xc2b2ae35);
  return ((hash ^ (hash >>> 16)) >>> 0) % 360;
}

function plural(count, one, many = `${one}s`) {
  return count === 1 ? one : many;
}

function jobColour(jobId) {
  return `hsl(${hue(jobId)} 62% 48%)`;
}

function jobLink(jobId) {
  return h("a", {href: `#jobs/${encodeURIComponent(jobId)}`, class: "job", text: jobId});
}

function table(headings, rows, props = {}) {
  return h("table", {class: "grid", ...props},
    h("thead", {}, h("tr", {}, headings.map((title) => h("th", {text: title})))),
    h("tbody", {}, rows));
}

function facts(pairs) {
  return h("dl", {class: "facts"}, pairs.filter(([, value]) => value !== undefined).flatMap(([term, value]) => [
    h("dt", {text: term}), h("dd", {}, value === null ? "–" : value)]));
}

// ---- the API -------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

function detailOf(body) {
  if (!body || typeof body !== "object") return "";
  if (typeof body.detail === "string") return body.detail;
  if (Array.isArray(body.detail)) {
    return body.detail.map((e) => `${(e.loc || []).slice(1).join(".")}: ${e.msg}`).join("; ");
  }
  return "";
}

async function api(path, {method = "GET", body, headers = {}} = {}) {
  const sent = {Accept: "application/json", ...headers};
  const key = apiKey();
  if (key) sent["X-API-Key"] = key;
  if (body !== undefined) sent["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(new URL(path, BASE), {method, headers: sent, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (error) {
    throw new ApiError(0, `the service does not answer (${error.message})`);
  }
  const text = await response.text();
  let answer = null;
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    answer = null;
  }
  if (!response.ok) {
    const detail = detailOf(answer) || `${response.status} ${response.statusText}`;
    if (response.status === 401) askForKey(key ? "The service did not take this key." : "This service asks for an API key.");
    if (response.status === 403) askForKey("The service does not accept this API key.");
    throw new ApiError(response.status, `${method} /${path} answered ${response.status}: ${detail}`);
  }
  return answer;
}

// ---- problems and the API key --------------------------------------------------------------------

// A problem reading a view is cleared by the next read that works; one of an action the user asked for
// (placing a job) stays until the next action, whatever the reads in between.
function showProblem(error, from = "read") {
  const box = $("#problem");
  box.textContent = error instanceof Error ? error.message : String(error);
  box.dataset.from = from;
  box.hidden = false;
}

function clearProblem(from = "read") {
  const box = $("#problem");
  if (box.dataset.from === from) box.hidden = true;
}

function askForKey(why) {
  $("#key-why").textContent = `${why} It is kept in this browser tab only (session storage) and sent in the X-API-Key header.`;
  const dialog = $("#key-dialog");
  if (dialog.hidden) {
    dialog.hidden = false;
    $("#key-input").focus();
  }
}

function showKeyState() {
  $("#key-button").textContent = apiKey() ? "API key: set" : "API key";
}

function setUpKey() {
  $("#key-button").addEventListener("click", () => askForKey("Give the API key the service was started with."));
  $("#key-dialog").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_ITEM, $("#key-input").value.trim());
    $("#key-input").value = "";
    $("#key-dialog").hidden = true;
    showKeyState();
    refreshNow();
  });
  $("#key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    $("#key-dialog").hidden = true;
    showKeyState();
  });
  $("#key-close").addEventListener("click", () => {
    $("#key-dialog").hidden = true;
  });
  showKeyState();
}

// ---- the status line and the poll ----------------------------------------------------------------

async function poll() {
  if (state.busy) {  // asked while a refresh runs: once more as soon as it is done
    state.again = true;
    return;
  }
  clearTimeout(state.timer);
  if (!document.hidden) {
    state.busy = true;
    try {
      const ready = await readiness();
      const changed = ready !== null && ready.generation !== state.seen;
      if (changed || Date.now() - state.refreshedAt >= REFRESH_MS) await refresh(ready);
    } finally {
      state.busy = false;
    }
  }
  const again = state.again;
  state.again = false;
  state.timer = setTimeout(poll, again ? 0 : POLL_MS);
}

function refreshNow() {
  state.refreshedAt = 0;
  state.seen = null;
  poll();
}

async function readiness() {
  const badge = $("#status-ready");
  let ready = null;
  try {
    const response = await fetch(new URL("readyz", BASE), {cache: "no-store", headers: {Accept: "application/json"}});
    ready = await response.json();
  } catch {
    ready = null;
  }
  if (ready === null || ready.status === "unavailable") {
    badge.textContent = ready === null ? "no answer" : "database down";
    badge.className = "badge bad";
    return null;
  }
  badge.textContent = ready.status;
  badge.className = `badge ${ready.status === "ready" ? "good" : "warn"}`;
  badge.title = ready.model_error || "";
  $("#status-model").textContent = `model ${ready.model_version}`;
  $("#status-generation").textContent = `generation ${number(ready.generation)}`;
  state.generation = ready.generation;
  return ready;
}

async function refresh(ready) {
  const view = state.view;
  try {
    await LOADERS[view]();
    if (state.view !== view) return;  // another view was asked for meanwhile: it is read next
    clearProblem();
    state.seen = ready ? ready.generation : null;
    state.refreshedAt = Date.now();
    $("#status-updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
    document.body.dataset.loaded = view;
  } catch (error) {
    if (state.view !== view) return;
    state.seen = ready ? ready.generation : null;  // tried again on the next change, or after REFRESH_MS
    state.refreshedAt = Date.now();
    showProblem(error);
  }
}

// ---- the cluster ---------------------------------------------------------------------------------

async function loadCluster() {
  state.cluster = await api("v1/cluster/gpus");
  renderCluster();
}

function machineInUse(m) {
  return m.jobs.length > 0;
}

function machineMatches(m, text) {
  if (!text) return true;
  if (m.name.toLowerCase().includes(text) || m.rack.toLowerCase().includes(text)) return true;
  if (m.gpu_type.toLowerCase() === text) return true;
  return m.jobs.some((job) => job.toLowerCase() === text);
}

function renderCluster() {
  const data = state.cluster;
  if (!data) return;
  const machines = data.machines;
  const gpus = machines.reduce((n, m) => n + m.gpu_milli.length, 0);
  const allocated = machines.reduce((n, m) => n + m.gpu_milli.reduce((a, b) => a + b, 0), 0) / 1000;
  const shared = machines.reduce((n, m) => n + m.gpu_milli.filter((x) => x > 0 && x < 1000).length, 0);
  const racks = new Map();
  for (const m of machines) {
    if (!racks.has(m.rack)) racks.set(m.rack, []);
    racks.get(m.rack).push(m);
  }
  const stat = (name, value, label) => h("span", {class: "stat", "data-stat": name, "data-value": value},
    h("b", {text: number(value)}), ` ${label}`);
  $("#cluster-summary").replaceChildren(
    h("span", {class: "stat"}, h("b", {text: data.name})), stat("machines", machines.length, "machines"),
    stat("racks", racks.size, plural(racks.size, "rack")), stat("gpus", gpus, plural(gpus, "GPU")),
    stat("allocated", Number(allocated.toFixed(3)), `GPUs allocated (${gpus ? (100 * allocated / gpus).toFixed(1) : 0} %)`),
    stat("shared", shared, `${plural(shared, "GPU")} partly allocated`),
    stat("running", data.running_jobs, `running ${plural(data.running_jobs, "job")}`));

  const text = $("#cluster-filter").value.trim().toLowerCase();
  const inUse = $("#cluster-in-use").checked;
  const byJob = $("#cluster-colour").value === "job";
  const fragment = document.createDocumentFragment();
  let shown = 0;
  for (const [rack, members] of racks) {
    const visible = members.filter((m) => machineMatches(m, text) && (!inUse || machineInUse(m)));
    if (!visible.length) continue;
    shown += visible.length;
    const rackGpus = members.reduce((n, m) => n + m.gpu_milli.length, 0);
    const rackMilli = members.reduce((n, m) => n + m.gpu_milli.reduce((a, b) => a + b, 0), 0);
    fragment.append(h("section", {class: "rack", "data-rack": rack},
      h("h3", {text: `${rack} · ${members[0].domain} · ${members.length} ${plural(members.length, "machine")} · ` +
        (rackGpus ? `${number(rackMilli / 1000)} of ${number(rackGpus)} GPUs allocated` : "CPU only")}),
      h("div", {class: "machines"}, visible.map((m) => machineCell(m, byJob, text)))));
  }
  if (!shown) fragment.append(h("p", {class: "note", text: "No machine matches."}));
  $("#racks").replaceChildren(fragment);
  $("#cluster-legend").replaceChildren(...legend(byJob));
  renderMachineDetail();
}

function legend(byJob) {
  const swatch = (cls, label) => h("span", {class: "key"}, h("i", {class: `swatch ${cls}`}), label);
  if (byJob) return [swatch("free", "free"), "each job its own colour; a bar's height is the share allocated"];
  return [swatch("free", "free"), swatch("partial", "partly allocated (shared)"), swatch("full", "fully allocated"),
    swatch("cpu", "CPU (CPU-only machines)")];
}

function machineCell(m, byJob, text) {
  const total = m.gpu_milli.reduce((a, b) => a + b, 0);
  const held = new Map();
  for (const s of m.shares) {
    if (!held.has(s.gpu)) held.set(s.gpu, []);
    held.get(s.gpu).push(s);
  }
  const bars = m.gpu_milli.map((milli, gpu) => {
    const shares = held.get(gpu) || [];
    const kind = milli >= 1000 ? "full" : milli > 0 ? "partial" : "free";
    const title = `GPU ${gpu}: ${share(milli)} of 1 allocated` +
      shares.map((s) => `\n${s.job_id}: ${share(s.milli)}`).join("");
    return h("div", {class: `gpu ${kind}`, "data-gpu": gpu, "data-milli": milli, title},
      shares.map((s) => h("div", {class: "seg", "data-job": s.job_id,
        style: {height: `${Math.min(100, s.milli / 10)}%`, background: byJob ? jobColour(s.job_id) : `var(--${kind})`}})));
  });
  if (!m.gpu_milli.length) {
    const used = m.cpu_cores ? m.cpu_cores_allocated / m.cpu_cores : 0;
    bars.push(h("div", {class: "gpu cpu", title: `CPU: ${number(m.cpu_cores_allocated)} of ${number(m.cpu_cores)} cores`},
      h("div", {class: "seg", style: {height: `${Math.min(100, 100 * used)}%`, background: "var(--cpu)"}})));
  }
  const hit = text && m.jobs.some((job) => job.toLowerCase() === text);
  return h("div", {class: `machine${state.machine === m.name ? " selected" : ""}${hit ? " hit" : ""}`, role: "button",
    tabindex: 0, "data-machine": m.name,
    title: `${m.name} · ${m.gpu_type} · ${number(total / 1000)} of ${m.gpu_milli.length} GPUs allocated`,
    onclick: () => selectMachine(m.name), onkeydown: (e) => { if (e.key === "Enter") selectMachine(m.name); }},
  h("div", {class: "name", text: m.name}), h("div", {class: "gpus"}, bars), h("div", {class: "type", text: m.gpu_type}));
}

function selectMachine(name) {
  state.machine = name;
  history.replaceState(null, "", `#cluster/${encodeURIComponent(name)}`);
  for (const el of document.querySelectorAll(".machine.selected")) el.classList.remove("selected");
  const cell = document.querySelector(`.machine[data-machine="${CSS.escape(name)}"]`);
  if (cell) cell.classList.add("selected");
  renderMachineDetail();
}

function renderMachineDetail() {
  const aside = $("#machine-detail");
  const m = state.cluster && state.machine ? state.cluster.machines.find((x) => x.name === state.machine) : null;
  if (!m) {
    aside.hidden = true;
    return;
  }
  const rows = m.gpu_milli.map((milli, gpu) => h("tr", {"data-gpu": gpu},
    h("td", {text: String(gpu)}),
    h("td", {class: "share", "data-milli": milli}, h("span", {class: "meter"},
      h("i", {style: {width: `${Math.min(100, milli / 10)}%`}})), ` ${share(milli)} of 1`),
    h("td", {text: `${number(m.gpu_mem_mib[gpu] / 1024, 1)} of ${number(m.gpu_mem_gib, 1)} GiB`}),
    h("td", {}, m.shares.filter((s) => s.gpu === gpu).flatMap((s, i) => [i ? ", " : "", jobLink(s.job_id), ` ${share(s.milli)}`]))));
  aside.replaceChildren(
    h("h2", {text: m.name}),
    facts([["rack", m.rack], ["domain", m.domain], ["GPU type", m.gpu_type],
      ["CPU cores", `${number(m.cpu_cores_allocated)} of ${number(m.cpu_cores)} allocated`],
      ["memory", `${number(m.mem_gib_allocated, 1)} of ${number(m.mem_gib, 1)} GiB allocated`],
      ["running jobs", m.jobs.length ? h("span", {id: "machine-jobs"}, m.jobs.flatMap((job, i) => [i ? ", " : "", jobLink(job)]))
        : "none"]]),
    m.gpu_milli.length ? table(["GPU", "allocated", "GPU memory", "jobs"], rows, {id: "machine-gpus"})
      : h("p", {class: "note", text: "A CPU-only machine."}),
    h("button", {type: "button", text: "Close", onclick: () => { state.machine = null; renderMachineDetail(); }}));
  aside.hidden = false;
}

// ---- jobs ----------------------------------------------------------------------------------------

async function loadJobs() {
  const [running, pending] = await Promise.all([api(`v1/jobs?state=running&limit=${LISTED}`),
    api(`v1/jobs?state=pending&limit=${LISTED}`)]);
  const waiting = pending.jobs.length ? await api("v1/queues/waiting") : {waiting: []};
  state.waiting = new Map(waiting.waiting.map((w) => [w.job_id, w]));
  const more = (page) => page.next ? `${number(page.jobs.length)}+` : number(page.jobs.length);
  $("#running-count").textContent = more(running);
  $("#pending-count").textContent = more(pending);
  $("#running-table tbody").replaceChildren(...running.jobs.map((j) => h("tr", {"data-job": j.job_id},
    h("td", {}, h("i", {class: "dot", style: {background: jobColour(j.job_id)}}), jobLink(j.job_id)),
    h("td", {text: j.queue ?? "placed directly"}), h("td", {text: j.mode ?? "–"}),
    h("td", {text: j.priority ?? "–"}), h("td", {text: when(j.placed_at)}))));
  $("#pending-table tbody").replaceChildren(...pending.jobs.map((j) => {
    const why = state.waiting.get(j.job_id);
    return h("tr", {"data-job": j.job_id},
      h("td", {}, jobLink(j.job_id)), h("td", {text: j.queue ?? "–"}), h("td", {text: j.priority ?? "–"}),
      h("td", {text: when(j.submitted_at)}),
      h("td", {class: "why"}, why ? [h("span", {class: `reason ${why.reason}`, text: why.reason}),
        why.details.length ? `: ${why.details.join("; ")}` : ""] : "starting"));
  }));
  if (state.job) await loadJob(state.job);
  else $("#job-detail").hidden = true;
}

async function loadJob(jobId) {
  const aside = $("#job-detail");
  let job;
  try {
    job = await api(`v1/jobs/${encodeURIComponent(jobId)}`);
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    aside.replaceChildren(h("h2", {text: jobId}), h("p", {class: "note", text: `No job ${jobId}.`}));
    aside.hidden = false;
    stopEvents();
    return;
  }
  let body = $("#job-body", aside);
  if (aside.dataset.job !== jobId || !body) {
    aside.dataset.job = jobId;
    body = h("div", {id: "job-body"});
    aside.replaceChildren(body, h("h3", {text: "Events"}), h("ol", {id: "job-events", class: "events"}));
  }
  body.replaceChildren(...jobParts(job));
  aside.hidden = false;
  if (state.eventsJob !== jobId) followEvents(job);
}

function jobParts(job) {
  const parts = [h("h2", {}, jobId(job), " ", h("span", {class: `badge state ${job.state}`, text: job.state}))];
  parts.push(facts([["queue", job.queue ?? "placed directly"], ["priority", job.priority ?? "–"],
    ["mode", job.mode ?? "–"], ["policy", job.policy || "–"], ["submitted", job.submitted_at ? when(job.submitted_at) : "–"],
    [job.state === "pending" ? "stored" : "started", when(job.placed_at)], ["ended", job.ended_at ? when(job.ended_at) : "–"]]));
  const why = state.waiting.get(job.job_id);
  if (job.state === "pending" && why) {
    parts.push(h("div", {class: "waiting", id: "job-waiting"}, h("h3", {text: "Why it waits"}),
      h("p", {}, h("span", {class: `reason ${why.reason}`, text: why.reason}),
        why.reservation_at_s ? ` (a place is reserved for it from ${when(why.reservation_at_s)})` : ""),
      h("ul", {class: "reasons"}, why.details.map((d) => h("li", {text: d})))));
  }
  const tasks = (job.demand.tasks || []).map((t, i) => h("tr", {},
    h("td", {text: String(i)}), h("td", {text: t.role}), h("td", {text: number(t.instances)}),
    h("td", {text: number(t.gpu)}), h("td", {text: number(t.cpu_cores)}), h("td", {text: number(t.mem_gib)}),
    h("td", {text: t.gpu_mem_gib == null ? "by share" : number(t.gpu_mem_gib)}),
    h("td", {text: (t.gpu_types || []).join(", ") || "any"})));
  parts.push(h("h3", {text: "Demand"}),
    table(["task", "role", "instances", "GPUs each", "CPU cores", "memory GiB", "GPU memory GiB", "GPU types"], tasks));
  if (job.allocation) {
    parts.push(h("h3", {text: "Allocation"}), allocationTable(job.allocation),
      h("button", {type: "button", text: "Show on the cluster", onclick: () => showOnCluster(job.job_id)}));
  }
  const estimate = job.details && job.details.estimate;
  if (estimate) parts.push(h("h3", {text: "Estimate"}), estimateParts(estimate));
  if (job.completion) {
    parts.push(h("h3", {text: "Completion"}), facts([["duration", `${number(job.completion.duration_s)} s`],
      ["usage", Object.entries(job.completion.usage).map(([k, v]) => `${k} ${number(v)}`).join(", ") || "–"]]));
  }
  return parts;
}

function jobId(job) {
  return h("span", {class: "job-id"}, h("i", {class: "dot", style: {background: jobColour(job.job_id)}}), job.job_id);
}

function allocationTable(allocation) {
  const rows = allocation.instances.map((p) => h("tr", {"data-machine": p.machine},
    h("td", {text: String(p.task)}),
    h("td", {}, h("a", {href: `#cluster/${encodeURIComponent(p.machine)}`, text: p.machine})),
    h("td", {text: p.gpus.join(", ") || "–"}),
    h("td", {class: "share", "data-milli": p.gpu_milli, text: p.gpus.length ? `${share(p.gpu_milli)} of each` : "–"}),
    h("td", {text: number(p.gpu_mem_mib / 1024, 1)}), h("td", {text: number(p.cpu_milli / 1000)}),
    h("td", {text: number(p.mem_mib / 1024, 1)})));
  return table(["task", "machine", "GPUs", "share of a GPU", "GPU memory GiB", "CPU cores", "memory GiB"], rows,
    {class: "grid allocation"});
}

function estimateParts(estimate) {
  const quantiles = (q) => q ? `${number(q.p50)} / ${number(q.p90)}` : "unknown";
  const rows = [];
  estimate.tasks.forEach((task, i) => {
    for (const [target, q] of Object.entries(task)) {
      if (target === "sources" || target === "needs") continue;
      rows.push(h("tr", {}, h("td", {text: String(i)}), h("td", {text: target}), h("td", {text: q ? number(q.point) : "–"}),
        h("td", {text: q ? number(q.p50) : "–"}), h("td", {text: q ? number(q.p90) : "–"})));
    }
  });
  return h("div", {}, facts([["model version", estimate.model_version],
    ["duration P50 / P90", estimate.duration_s ? `${quantiles(estimate.duration_s)} s` : "unknown"]]),
  table(["task", "target", "point", "P50", "P90"], rows));
}

function showOnCluster(jobIdText) {
  $("#cluster-filter").value = jobIdText;
  state.machine = null;
  location.hash = "#cluster";
}

function stopEvents() {
  if (state.events) state.events.abort();
  state.events = null;
  state.eventsJob = null;
}

// Server-sent events read with fetch rather than EventSource: EventSource cannot send the API key header.
async function followEvents(job) {
  stopEvents();
  const control = new AbortController();
  state.events = control;
  state.eventsJob = job.job_id;
  const list = $("#job-events");
  list.replaceChildren();
  if (job.queue === null) {
    list.append(h("li", {class: "note", text: "Placed directly, not through a queue: no events."}));
    return;
  }
  let last = 0;
  let final = FINAL.has(job.state);
  const follow = !final;
  while (!control.signal.aborted) {
    const headers = {Accept: "text/event-stream"};
    if (apiKey()) headers["X-API-Key"] = apiKey();
    if (last) headers["Last-Event-ID"] = String(last);
    try {
      const url = new URL(`v1/jobs/${encodeURIComponent(job.job_id)}/events?follow=${follow}`, BASE);
      const response = await fetch(url, {headers, signal: control.signal, cache: "no-store"});
      if (!response.ok) {
        list.append(h("li", {class: "note", text: `events: ${response.status} ${response.statusText}`}));
        return;
      }
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = parseEvent(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          if (!event) continue;
          last = event.id;
          final = FINAL.has(event.state);
          list.append(h("li", {"data-state": event.state},
            h("span", {class: `badge state ${event.state}`, text: event.state}), ` ${event.reason} `,
            h("span", {class: "when", text: when(event.at)})));
          if (state.view === "jobs" && state.job === job.job_id) refreshSoon();
        }
      }
    } catch (error) {
      if (control.signal.aborted) return;
      list.append(h("li", {class: "note", text: `events: ${error.message}`}));
    }
    if (!follow || final) return;
    await new Promise((resolve) => setTimeout(resolve, 1000));  // the stream ends after 300 s: resume
  }
}

function parseEvent(block) {
  let id = 0;
  let data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("id:")) id = Number(line.slice(3).trim());
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return null;
  try {
    return {id, ...JSON.parse(data)};
  } catch {
    return null;
  }
}

let soon = null;

function refreshSoon() {
  clearTimeout(soon);
  soon = setTimeout(refreshNow, 300);
}

// ---- queues --------------------------------------------------------------------------------------

function resourceOrder(a, b) {
  const rank = (key) => key === "gpus" ? 0 : key.startsWith("gpus:") ? 1 : key === "cpu_cores" ? 2 : 3;
  return rank(a) - rank(b) || a.localeCompare(b);
}

async function loadQueues() {
  const answer = await api("v1/queues");
  const rows = [];
  for (const q of answer.queues) {
    const keys = [...new Set([...Object.keys(q.quota), ...Object.keys(q.usage), ...Object.keys(q.borrowing_limit)])]
      .sort(resourceOrder);
    if (!keys.length) keys.push(null);
    keys.forEach((key, i) => {
      const cells = [];
      if (i === 0) {
        const span = {rowspan: keys.length};
        cells.push(h("th", {...span, scope: "row", class: "queue", text: q.name}), h("td", {...span, text: q.order}),
          h("td", {...span, text: q.cohort ?? "–"}),
          h("td", {...span, class: "pending", "data-value": q.pending, text: number(q.pending)}));
      }
      const amount = (values, cls) => h("td", {class: cls, "data-value": key === null || !(key in values) ? "" : values[key],
        text: key === null || !(key in values) ? "–" : number(values[key])});
      const quota = key === null ? undefined : q.quota[key];
      const used = key === null ? 0 : q.usage[key] ?? 0;
      const of = quota === undefined ? h("span", {class: "note", text: "no quota"})
        : quota === 0 ? h("span", {class: "note", text: used > 0 ? "borrowed: quota 0" : "quota 0"})
          : [h("span", {class: `meter${used > quota ? " over" : ""}`},
            h("i", {style: {width: `${100 * Math.min(1, used / quota)}%`}})), ` ${(100 * used / quota).toFixed(0)} %`];
      cells.push(h("td", {class: "resource", text: key ?? "no resource counted"}), amount(q.quota, "quota"),
        amount(q.usage, "usage"), amount(q.borrowing_limit, "limit"), h("td", {}, of));
      rows.push(h("tr", {"data-queue": q.name, "data-resource": key ?? ""}, cells));
    });
  }
  $("#queues-table tbody").replaceChildren(...rows);
  const others = Object.entries(answer.other_pending);
  $("#queues-note").textContent = (answer.configured ? "" : "No queue configuration is set: every job goes to the queue 'default'. ") +
    (others.length ? `Pending in queues the configuration does not have: ${others.map(([q, n]) => `${q} ${n}`).join(", ")}.` : "");
}

// ---- the model -----------------------------------------------------------------------------------

async function loadModel() {
  const [models, error] = await Promise.all([api("v1/models"), api("v1/models/error")]);
  $("#model-card").replaceChildren(
    h("h2", {}, "Answering: ", h("span", {id: "model-answering", text: models.answering}),
      " ", h("span", {class: `badge ${models.degraded ? "warn" : "good"}`, text: models.degraded ? "degraded" : "ready"})),
    facts([["alias", models.alias], ["loaded", models.loaded_at ? when(models.loaded_at) : "–"],
      ["last error", models.last_error ?? "none"],
      ["refused", models.refused ? `version ${models.refused.version} (${when(models.refused.at)}): ${models.refused.reason}` : "none"]]));
  const rows = error.targets.map((t) => h("tr", {"data-target": t.target, "data-version": t.model_version},
    h("td", {text: t.target}), h("td", {text: t.model_version}), h("td", {class: "jobs", text: number(t.jobs)}),
    h("td", {class: "recent", text: number(t.recent_male, 3)}), h("td", {text: number(t.train_male, 3)}),
    h("td", {text: number(t.male_ratio, 2)}), h("td", {text: number(t.recent_p90_coverage, 2)}),
    h("td", {text: number(t.train_p90_coverage, 2)}),
    h("td", {class: "drifted"}, h("span", {class: `badge ${t.drifted ? "bad" : t.drifted === false ? "good" : ""}`,
      text: t.drifted === null ? "unknown" : t.drifted ? "drifted" : "no"})),
    h("td", {}, sparkline(t.rolling_male, t.train_male))));
  $("#model-error-table tbody").replaceChildren(...rows);
  let note = `Over the ${number(error.completions)} most recently completed jobs (at most ${number(error.window)}). ` +
    `A target drifts when its recent MALE is above ${error.ratio_limit} times the one at training, or its P90 coverage ` +
    `fell by more than ${error.coverage_drop}.`;
  if (!error.targets.length) {
    note += " No completed job has both an estimate and a measurement of a target yet" +
      (models.answering === "heuristic" ? " (the heuristic answers: it estimates no duration or usage)." : ".");
  }
  $("#model-error-note").textContent = note;
}

function sparkline(values, reference) {
  const ns = "http://www.w3.org/2000/svg";
  const width = 160;
  const height = 32;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "rolling mean absolute log error, oldest first");
  const all = reference === null ? values : [...values, reference];
  const top = Math.max(...all, 1e-9) * 1.1;
  const y = (v) => (height - 2 - (height - 4) * v / top).toFixed(1);
  if (reference !== null) {
    const line = document.createElementNS(ns, "line");
    for (const [k, v] of Object.entries({x1: 0, x2: width, y1: y(reference), y2: y(reference), class: "reference"})) line.setAttribute(k, v);
    svg.append(line);
  }
  if (values.length) {
    const step = values.length > 1 ? width / (values.length - 1) : 0;
    const points = values.map((v, i) => `${(i * step).toFixed(1)},${y(v)}`);
    if (values.length === 1) points.push(`${width},${y(values[0])}`);
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("points", points.join(" "));
    svg.append(path);
  }
  return svg;
}

// ---- placing a job -------------------------------------------------------------------------------

async function loadPlace() {
  if (state.policies === null) {
    state.policies = [];
    try {
      const document_ = await api("openapi.json");
      const property = document_.components.schemas.PlaceIn.properties.policy;
      const found = JSON.stringify(property).match(/"enum":(\[[^\]]*\])/);
      state.policies = found ? JSON.parse(found[1]) : [];
    } catch {
      state.policies = [];
    }
    const select = $("#place-policy");
    for (const name of state.policies) select.append(h("option", {value: name, text: name}));
  }
  if (!$("#place-job-id").value) $("#place-job-id").value = `try-${Date.now().toString(36)}`;
  renderHistory();
}

function placeBody() {
  const value = (id) => $(id).value.trim();
  const task = {instances: Number(value("#place-instances")), gpu: Number(value("#place-gpu")),
    cpu_cores: Number(value("#place-cpu") || 0), mem_gib: Number(value("#place-mem") || 0),
    gpu_types: value("#place-gpu-types") ? value("#place-gpu-types").split(",").map((t) => t.trim()).filter(Boolean) : []};
  if (value("#place-gpu-mem")) task.gpu_mem_gib = Number(value("#place-gpu-mem"));
  const body = {job_id: value("#place-job-id"), tasks: [task], dry_run: $("#place-dry-run").checked};
  if (value("#place-policy")) body.policy = value("#place-policy");
  return body;
}

async function place(event) {
  event.preventDefault();
  const body = placeBody();
  const button = $("#place-submit");
  button.disabled = true;
  try {
    const decision = await api("v1/place", {method: "POST", body});
    clearProblem("action");
    renderDecision(decision);
    remember(decision);
    if (decision.committed) $("#place-job-id").value = `try-${Date.now().toString(36)}`;
  } catch (error) {
    showProblem(error, "action");
  } finally {
    button.disabled = false;
  }
}

function renderDecision(decision) {
  const box = $("#decision");
  const parts = [h("h2", {}, jobId(decision), " ",
    h("span", {id: "decision-verdict", class: `badge verdict ${decision.verdict}`, text: decision.verdict}), " ",
    h("span", {class: "note", text: decision.committed ? "stored: it holds this allocation now" : "not stored"}))];
  parts.push(facts([["policy", decision.policy], ["decided on generation", number(decision.generation)]]));
  const scores = Object.entries(decision.score);
  if (scores.length) {
    const top = Math.max(...scores.map(([, v]) => Math.abs(v)), 1e-9);
    parts.push(h("h3", {text: "Score breakdown"}), table(["term", "value", ""], scores.map(([term, value]) =>
      h("tr", {"data-term": term}, h("td", {text: term}), h("td", {class: "value", text: number(value, 3)}),
        h("td", {}, h("span", {class: "meter"}, h("i", {style: {width: `${100 * Math.abs(value) / top}%`}}))))),
    {id: "decision-score"}));
  }
  if (decision.reasons.length) {
    parts.push(h("h3", {text: decision.allocation ? "Notes" : "Why it does not fit"}),
      h("ul", {id: "decision-reasons", class: "reasons"}, decision.reasons.map((r) => h("li", {text: r}))));
  }
  if (decision.allocation) parts.push(h("h3", {text: "Allocation"}), allocationTable(decision.allocation));
  parts.push(h("h3", {text: "Estimate"}), estimateParts(decision.estimate));
  box.replaceChildren(...parts);
  box.hidden = false;
}

function remember(decision) {
  const kept = JSON.parse(sessionStorage.getItem(HISTORY_ITEM) || "[]");
  kept.unshift({at: Date.now() / 1000, decision});
  sessionStorage.setItem(HISTORY_ITEM, JSON.stringify(kept.slice(0, HISTORY)));
  renderHistory();
}

function renderHistory() {
  const kept = JSON.parse(sessionStorage.getItem(HISTORY_ITEM) || "[]");
  $("#decision-history").replaceChildren(...kept.map(({at, decision}) => h("li", {},
    h("button", {type: "button", class: "link", onclick: () => renderDecision(decision)},
      h("span", {class: `badge verdict ${decision.verdict}`, text: decision.verdict}), ` ${decision.job_id}`),
    ` ${decision.committed ? "stored" : "not stored"} · ${when(at)}`)));
}

// ---- views ---------------------------------------------------------------------------------------

const LOADERS = {cluster: loadCluster, jobs: loadJobs, queues: loadQueues, model: loadModel, place: loadPlace};

function route() {
  const [view, ...rest] = location.hash.replace(/^#/, "").split("/");
  const chosen = VIEWS.includes(view) ? view : "cluster";
  const item = rest.length ? decodeURIComponent(rest.join("/")) : null;
  state.view = chosen;
  if (chosen === "jobs") {
    state.job = item;
    if (!item) stopEvents();
  } else {
    stopEvents();
  }
  if (chosen === "cluster" && item) state.machine = item;
  for (const name of VIEWS) $(`#view-${name}`).hidden = name !== chosen;
  for (const link of document.querySelectorAll("#tabs a")) {
    if (link.dataset.view === chosen) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  delete document.body.dataset.loaded;
  clearProblem("action");
  refreshNow();
}

function setUp() {
  setUpKey();
  let typing = null;  // drawn again once typing pauses: every machine of a large cluster is redrawn
  $("#cluster-filter").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(renderCluster, 150);
  });
  $("#cluster-in-use").addEventListener("change", renderCluster);
  $("#cluster-colour").addEventListener("change", renderCluster);
  $("#job-find").addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = $("#job-find-id").value.trim();
    if (wanted) location.hash = `#jobs/${encodeURIComponent(wanted)}`;
  });
  $("#place-form").addEventListener("submit", place);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshNow(); });
  window.addEventListener("hashchange", route);
  route();
}

setUp();
