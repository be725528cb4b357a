// The live page: /status and /ui/history, drawn every two seconds, with
// drain and undrain buttons.
"use strict";

const EVERY_MS = 2000;
const RECENT = 15; // samples the share of picks is taken over

function token() {
	return sessionStorage.getItem("rotor-admin-token") || "";
}

// spark draws a series as a small line, scaled to its own range (or to
// [0, 1] for ratios).
function spark(values, label, unitMax) {
	const w = 120, h = 26;
	const svg = el("svg", {class: "spark", width: w, height: h, viewBox: "0 0 " + w + " " + h, role: "img", "aria-label": label});
	if (!values || values.length === 0) return svg;
	const top = unitMax !== undefined ? unitMax : Math.max(...values, 1e-9);
	const step = values.length > 1 ? w / (values.length - 1) : 0;
	const pts = values.map((v, i) => (i * step).toFixed(1) + "," + (h - 2 - (h - 4) * Math.min(v, top) / top).toFixed(1));
	svg.append(el("polyline", {points: pts.join(" ")}), el("title", {text: label}));
	return svg;
}

// sparkCell is a sparkline with its latest value beside it.
function sparkCell(values, what, format, unitMax) {
	const latest = values && values.length ? format(values[values.length - 1]) : "none yet";
	return el("div", {class: "sparkcell"}, spark(values, what + ", latest " + latest, unitMax),
		el("span", {class: "caption num", "aria-hidden": "true"}, latest));
}

function sum(a) {
	return a.reduce((x, y) => x + y, 0);
}

function recentPicks(series) {
	return series ? sum(series.picks.slice(-RECENT)) : 0;
}

async function act(pool, name, action) {
	const msg = document.getElementById("action-error");
	msg.textContent = "";
	const headers = {};
	if (token()) headers["Authorization"] = "Bearer " + token();
	try {
		await getJSON("/admin/endpoints/" + encodeURIComponent(pool) + "/" + encodeURIComponent(name) + "/" + action,
			{method: "POST", headers});
	} catch (err) {
		msg.textContent = action + " " + pool + "/" + name + ": " + err.message;
		if (err.status === 401 || err.status === 403) document.getElementById("token-box").open = true;
	}
	refresh();
}

function drawPool(pool, history) {
	const byName = {};
	for (const e of (history && history.endpoints) || []) byName[e.name] = e;
	const total = sum(pool.endpoints.map((e) => recentPicks(byName[e.name])));
	const rows = pool.endpoints.map((e) => {
		const h = byName[e.name];
		const share = total > 0 ? recentPicks(h) / total : 0;
		const breaker = e.breaker || "closed";
		const states = [el("span", {class: "state-" + breaker}, breaker)];
		if (e.draining) states.push(" ", el("span", {class: "badge"}, "draining"));
		if (e.down) states.push(" ", el("span", {class: "badge error"}, "down"));
		if (e.backup) states.push(" ", el("span", {class: "badge"}, "backup"));
		const action = e.draining ? "undrain" : "drain";
		const succ = h ? h.success : [];
		const lat = h ? h.latency_ms : [];
		return el("tr", {"data-endpoint": e.name, "data-draining": e.draining ? "true" : "false"},
			el("th", {scope: "row"}, e.name, el("div", {class: "caption mono"}, e.address),
				e.state_source === "shared" ? el("div", {class: "caption"}, "state shared") : null),
			el("td", {}, ...states),
			el("td", {class: "num"}, e.score.toFixed(3)),
			el("td", {class: "num"}, String(e.inflight)),
			el("td", {class: "num", "data-share": share.toFixed(4)}, pct(share)),
			el("td", {}, sparkCell(succ, "success of " + e.name, (v) => v.toFixed(3), 1)),
			el("td", {}, sparkCell(lat, "latency of " + e.name, (v) => v.toFixed(1) + " ms")),
			el("td", {}, el("button", {type: "button", class: "action", "data-action": action, "data-key": pool.name + "/" + e.name,
				"aria-label": (e.draining ? "Undrain " : "Drain ") + e.name + " in " + pool.name,
				onclick: () => act(pool.name, e.name, action)}, e.draining ? "Undrain" : "Drain")));
	});
	const s = pool.stats;
	return el("div", {class: "panel pool", "data-pool": pool.name},
		el("h3", {}, pool.name + " ", el("span", {class: "caption"}, pool.policy)),
		el("p", {class: "caption"}, "fallbacks " + s.fallbacks + " · panic picks " + s.panics + " · backup picks " + s.backups +
			" · no endpoint " + s.unavailable),
		pool.dns ? el("p", {class: "caption" + (pool.dns.error ? " error" : ""), "data-dns": pool.dns.name},
			"Endpoints from DNS: " + pool.dns.type + " " + pool.dns.name + ", " + pool.dns.addresses.length + " found" +
			(pool.dns.error ? "; the last lookup failed (" + pool.dns.error + "), the last good answer serves" : "")) : null,
		el("div", {class: "table-wrap"}, el("table", {},
			el("thead", {}, el("tr", {}, ...["endpoint", "breaker", "score", "in flight", "share of picks", "success", "latency", "action"].map(
				(t) => el("th", {scope: "col"}, t)))),
			el("tbody", {}, ...rows))));
}

let busy = false;

async function refresh() {
	if (busy) return;
	busy = true;
	try {
		const [status, history] = await Promise.all([getJSON("/status"), getJSON("/ui/history").catch(() => null)]);
		const r = status.reload;
		const reload = document.getElementById("reload");
		const st = status.state || {store: "memory", healthy: true};
		reload.replaceChildren("Config generation " + r.generation + ", loaded " + new Date(r.at).toLocaleString() + ".",
			r.error ? el("span", {class: "error"}, " The last reload was refused: " + r.error) : "",
			" State: " + st.store + (st.store === "memory" ? "." : ""),
			st.store !== "memory" ? el("span", {class: st.healthy ? "state-closed" : "error", id: "state-health"},
				st.healthy ? " shared." : " out of reach, serving on local state (" + (st.error || "") + ").") : "");
		document.querySelector("#listeners tbody").replaceChildren(...(status.listeners || []).map((l) =>
			el("tr", {}, el("td", {}, l.name), el("td", {}, l.kind), el("td", {class: "mono"}, l.addr))));
		const hp = {};
		for (const p of (history && history.pools) || []) hp[p.name] = p;
		// Redrawing must not take the keyboard's place away.
		const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : undefined;
		document.getElementById("pools").replaceChildren(...status.pools.map((p) => drawPool(p, hp[p.name])));
		if (focused) {
			for (const b of document.querySelectorAll("#pools button[data-key]")) {
				if (b.dataset.key === focused) b.focus();
			}
		}
		document.body.dataset.refreshed = String(Date.now());
	} catch (err) {
		document.getElementById("reload").textContent = "Cannot reach rotor: " + err.message;
	} finally {
		busy = false;
	}
}

document.addEventListener("DOMContentLoaded", () => {
	document.getElementById("token-form").addEventListener("submit", (e) => {
		e.preventDefault();
		sessionStorage.setItem("rotor-admin-token", document.getElementById("token").value);
		document.getElementById("action-error").textContent = "";
	});
	refresh();
	setInterval(refresh, EVERY_MS);
});
