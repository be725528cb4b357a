// The lesson page: it asks rotor's API for every figure and draws it.
"use strict";

const KEYS = 10000; // keys placed for the bars and the strips
const R = 100; // the clock face's radius

const state = {
	algo: "ring",
	vnodes: 1,
	nodes: ["s0", "s1", "s2"],
	change: null, // {from: [...], to: [...]}: the last membership change
	lookedUp: null, // the last lookup, redrawn on the clock after changes
};

const NAMES = {
	ring: "consistent hash ring",
	rendezvous: "rendezvous",
	jump: "jump",
	maglev: "Maglev",
	bounded: "bounded load",
	modn: "hash % N",
};

const POLICY_NOTES = {
	round_robin: "the i-th request to server i % N",
	random: "any server, at random",
	least_conn: "the fewest requests in flight",
	p2c: "the less loaded of two random servers",
	weighted_round_robin: "nginx's smooth interleaving of weights",
	weighted_least_conn: "fewest in flight per unit of weight",
	peak_ewma: "latency EWMA × (in flight + 1), of two",
	scored: "success × relative latency, learned",
	sticky: "one user, one server: a table",
	ring: "hash of the user on a ring",
	rendezvous: "highest hash score of the user",
	maglev: "the user's slot in Maglev's table",
	bounded: "ring, capped at 1.25 × the mean load",
};

// Colours follow the server's number, so a server keeps its colour when
// another is removed.
function nodeColour(name) {
	const n = parseInt(name.replace(/^\D+/, ""), 10);
	return colour(Number.isNaN(n) ? 0 : n);
}

function params(extra) {
	const p = new URLSearchParams({algo: state.algo, vnodes: String(state.vnodes), keys: String(KEYS)});
	for (const [k, v] of Object.entries(extra)) p.set(k, v);
	return p.toString();
}

// Each refresh has a generation; an answer to an older one is dropped, so
// a fast slider cannot leave stale figures on screen.
let generation = 0;

async function refresh() {
	const gen = ++generation;
	try {
		const nodes = state.nodes.join(",");
		const [ring, moves, place] = await Promise.all([
			getJSON("/api/ring?" + params({nodes})),
			state.change ? getJSON("/api/moves?" + params({from: state.change.from.join(","), to: state.change.to.join(",")})) : null,
			state.lookedUp ? getJSON("/api/place?" + params({nodes, key: state.lookedUp})) : null,
		]);
		if (gen !== generation) return;
		drawClock(ring);
		drawOwned(ring);
		if (moves) drawStrips(moves);
		if (place) drawWalk(place);
		document.body.dataset.ready = String(gen);
	} catch (err) {
		if (gen === generation) showError(err);
	}
}

function showError(err) {
	const caption = document.getElementById("clock-caption");
	caption.textContent = "Error: " + err.message;
	caption.classList.add("error");
}

function point(at, r) {
	const a = at * 2 * Math.PI - Math.PI / 2;
	return [r * Math.cos(a), r * Math.sin(a)];
}

// arc is the path clockwise from one turn fraction to another on radius r.
function arc(from, to, r) {
	let span = to - from;
	if (span <= 0) span += 1;
	if (span >= 0.9999) {
		return "M " + (-r) + " 0 A " + r + " " + r + " 0 1 1 " + r + " 0 A " + r + " " + r + " 0 1 1 " + (-r) + " 0";
	}
	const [x1, y1] = point(from, r);
	const [x2, y2] = point(from + span, r);
	return "M " + x1.toFixed(2) + " " + y1.toFixed(2) + " A " + r + " " + r + " 0 " + (span > 0.5 ? 1 : 0) + " 1 " + x2.toFixed(2) + " " + y2.toFixed(2);
}

let lastRing = null;

function drawClock(doc) {
	lastRing = doc;
	const svg = document.getElementById("clock");
	svg.replaceChildren(el("title", {id: "clock-title", text: "The key space as a clock face: " + NAMES[doc.algo]}));
	svg.append(el("circle", {cx: 0, cy: 0, r: R, fill: "none", stroke: "currentColor", "stroke-opacity": 0.15, "stroke-width": 10}));
	if (doc.circle) {
		// A key belongs to the first point clockwise past it, so the arc
		// that ends at a point is that point's node's. Runs of one node's
		// arcs are drawn as one.
		const pts = doc.points;
		const arcs = el("g", {class: "arcs"});
		let start = pts[pts.length - 1].at;
		for (let i = 0; i < pts.length; i++) {
			const last = i === pts.length - 1 || pts[i + 1].node !== pts[i].node;
			if (!last) continue;
			arcs.append(el("path", {d: arc(start, pts[i].at, R), stroke: nodeColour(pts[i].node), "stroke-width": 10, fill: "none"},
				el("title", {text: "arc of " + pts[i].node})));
			start = pts[i].at;
		}
		svg.append(arcs);
		if (pts.length <= 400) {
			const ticks = el("g", {class: "points"});
			for (const p of pts) {
				const [x1, y1] = point(p.at, R - 8);
				const [x2, y2] = point(p.at, R + 8);
				ticks.append(el("line", {x1, y1, x2, y2, stroke: "currentColor", "stroke-width": 1.2},
					el("title", {text: p.label})));
			}
			svg.append(ticks);
		}
	}
	const dots = el("g", {class: "dots"});
	for (const d of doc.dots) {
		const [x, y] = point(d.at, R - 18);
		dots.append(el("circle", {cx: x.toFixed(2), cy: y.toFixed(2), r: 2.2, fill: nodeColour(d.node)},
			el("title", {text: d.key + " → " + d.node})));
	}
	svg.append(dots);
	const caption = document.getElementById("clock-caption");
	caption.classList.remove("error");
	caption.textContent = doc.circle
		? doc.points.length + " points on the ring; each arc is owned by the point at its clockwise end. Dots are the first " + doc.dots.length + " keys, coloured by owner."
		: NAMES[doc.algo] + " puts no servers on a circle: dots are the first " + doc.dots.length + " keys at their hash, coloured by owner, and owners are scattered.";
}

function drawOwned(doc) {
	const list = document.getElementById("owned");
	const most = Math.max(...doc.owned.map((o) => o.keys), 1);
	document.getElementById("owned-of").textContent = "(of " + fmtInt.format(doc.keys) + " keys)";
	list.replaceChildren(...doc.owned.map((o) => {
		const li = el("li", {"data-node": o.node, "data-keys": o.keys},
			el("span", {class: "name"}, el("span", {class: "swatch", style: {background: nodeColour(o.node)}}), o.node),
			el("span", {class: "bar", role: "img", "aria-label": o.node + " owns " + pct(o.keys / doc.keys) + " of the keys"},
				el("span", {style: {width: (100 * o.keys / most).toFixed(1) + "%", background: nodeColour(o.node)}})),
			el("span", {class: "num"}, fmtInt.format(o.keys) + " (" + pct(o.keys / doc.keys, 0) + ")"),
			el("button", {type: "button", class: "icon", "aria-label": "Remove server " + o.node, title: "Remove " + o.node,
				disabled: state.nodes.length <= 1, onclick: () => removeNode(o.node)}, "×"));
		return li;
	}));
	document.getElementById("spread").textContent = "The fullest server holds " + doc.spread.max_over_mean.toFixed(2) +
		"× the mean (1 is perfect); standard deviation " + pct(doc.spread.stddev_over_mean, 0) + " of the mean.";
}

function drawStrips(doc) {
	const box = document.getElementById("strips");
	const ch = state.change;
	box.replaceChildren(el("p", {class: "caption"}, "The last change: " + ch.from.join(", ") + " → " + ch.to.join(", ") +
		". Each cell is one of the first " + doc.rows[0].strip.length + " keys; red ones moved."));
	for (const row of doc.rows) {
		const cells = el("div", {class: "cells", role: "img", "aria-label": NAMES[row.algo] + ": " + (row.strip.split("1").length - 1) + " of these keys moved"});
		for (const c of row.strip) cells.append(el("span", {class: c === "1" ? "moved" : null}));
		const note = row.only_changed
			? "every moved key went to a new server or came from a removed one"
			: fmtInt.format(row.stray) + " keys moved between servers that did not change";
		box.append(el("div", {class: "strip panel", "data-algo": row.algo, "data-moved": row.moved, "data-fraction": row.fraction, "data-keys": row.keys},
			el("h3", {}, NAMES[row.algo] + ": moved ",
				el("span", {class: "moved-count"}, fmtInt.format(row.moved)), " of " + fmtInt.format(row.keys) + " keys (",
				el("span", {class: "moved-pct"}, pct(row.fraction)), ")"),
			el("p", {class: "caption"}, "The least any placer must move: " + pct(row.ideal) + "; " + note + "."),
			cells,
			el("code", {class: "cmd"}, row.command)));
	}
}

function drawWalk(doc) {
	const box = document.getElementById("walk");
	box.hidden = false;
	const steps = el("ol", {});
	for (const s of doc.steps) {
		const parts = [];
		if (s.label) parts.push(el("span", {class: "mono"}, s.label));
		if (s.node) parts.push(" (" + s.node + ")");
		if (s.score) parts.push(" score " + s.score.toPrecision(6));
		if (s.note) parts.push((parts.length ? ": " : "") + s.note);
		steps.append(el("li", {}, ...parts));
	}
	box.replaceChildren(
		el("h3", {}, el("span", {class: "mono"}, doc.key), " belongs to ",
			el("strong", {id: "owner", "data-owner": doc.owner}, doc.owner)),
		el("p", {class: "caption"}, "What " + NAMES[state.algo] + " looked at, in order:"),
		steps,
		el("code", {class: "cmd"}, doc.command));
	// On the clock: the key, and for a ring the clockwise walk to the
	// owner's point.
	const svg = document.getElementById("clock");
	svg.querySelector(".walkmark")?.remove();
	const g = el("g", {class: "walkmark"});
	const [kx, ky] = point(doc.key_at, R + 16);
	const [kx2, ky2] = point(doc.key_at, R - 6);
	g.append(el("line", {x1: kx, y1: ky, x2: kx2, y2: ky2, stroke: "currentColor", "stroke-width": 2.5}));
	g.append(el("text", {x: kx, y: ky, "font-size": 9, "text-anchor": "middle", dy: ky < 0 ? -3 : 9, fill: "currentColor"}, doc.key));
	const owned = doc.steps.filter((s) => s.at !== undefined && s.node === doc.owner);
	if (owned.length && lastRing && lastRing.circle) {
		const end = owned[owned.length - 1].at;
		g.append(el("path", {d: arc(doc.key_at, end, R + 10), stroke: "currentColor", "stroke-width": 2.5, fill: "none", "stroke-dasharray": "4 3"}));
		const [ox, oy] = point(end, R);
		g.append(el("circle", {cx: ox, cy: oy, r: 5, fill: nodeColour(doc.owner), stroke: "currentColor", "stroke-width": 1.5}));
	}
	svg.append(g);
}

function nextName() {
	for (let i = 0; ; i++) {
		if (!state.nodes.includes("s" + i)) return "s" + i;
	}
}

function changeTo(nodes) {
	state.change = {from: state.nodes.slice(), to: nodes};
	state.nodes = nodes;
	refresh();
}

function removeNode(name) {
	if (state.nodes.length <= 1) return;
	changeTo(state.nodes.filter((n) => n !== name));
}

// The balancing cards.

let runs = 0;

async function runClock() {
	const run = ++runs;
	const button = document.getElementById("run");
	const status = document.getElementById("run-status");
	const bar = document.getElementById("clockbar");
	const seed = document.getElementById("seed").value.trim() || "1";
	const p = new URLSearchParams({seed});
	if (document.getElementById("slow").checked) p.set("slow", "1");
	if (document.getElementById("hot").checked) p.set("hot", "1");
	button.disabled = true;
	status.textContent = "Simulating…";
	bar.style.transition = "none";
	bar.style.width = "0";
	try {
		const doc = await getJSON("/api/balance?" + p.toString());
		if (run !== runs) return;
		const longest = Math.max(...doc.results.map((r) => r.virtual_duration_ns));
		// The clock runs over the simulated time, sped up to a second.
		void bar.offsetWidth;
		bar.style.transition = "width 1s linear";
		bar.style.width = "100%";
		await new Promise((ok) => setTimeout(ok, 1000));
		if (run !== runs) return;
		drawCards(doc);
		status.textContent = doc.condition + ": " + fmtInt.format(doc.results[0].requests) + " requests at " +
			doc.rate.toFixed(0) + " a second, " + (longest / 1e9).toFixed(0) + " s of simulated time, seed " + seed + ".";
		document.getElementById("cards").dataset.run = String(run);
	} catch (err) {
		status.textContent = "Error: " + err.message;
	} finally {
		button.disabled = false;
	}
}

function drawCards(doc) {
	const cards = document.getElementById("cards");
	const best = Math.min(...doc.results.map((r) => r.mean_ns));
	cards.replaceChildren(...doc.results.map((r) => {
		const shares = el("div", {class: "shares", role: "img",
			"aria-label": "share of requests per server: " + r.share.map((s, i) => "s" + i + " " + pct(s, 0)).join(", ")});
		const labels = el("div", {class: "shares-labels", "aria-hidden": "true"});
		r.share.forEach((s, i) => {
			shares.append(el("span", {style: {height: (100 * Math.min(1, s / 0.5)).toFixed(1) + "%"}, title: "s" + i + ": " + pct(s)}));
			labels.append(el("span", {}, "s" + i + " " + pct(s, 0)));
		});
		return el("article", {class: "card panel", "data-policy": r.policy, "data-mean-ns": r.mean_ns},
			el("h3", {}, r.policy),
			el("p", {class: "sub"}, POLICY_NOTES[r.policy] || ""),
			el("p", {class: "avg"}, "avg time ", el("span", {class: "avg-ms"}, ms(r.mean_ns)), " ms",
				r.mean_ns === best ? el("span", {class: "badge best"}, "best") : null),
			el("p", {class: "sub"}, "p99 " + ms(r.p99_ns) + " ms · longest queue " + r.max_queue),
			shares, labels,
			el("code", {class: "cmd"}, doc.commands[r.policy]));
	}));
}

document.addEventListener("DOMContentLoaded", () => {
	const slider = document.getElementById("vnodes");
	let timer = 0;
	slider.addEventListener("input", () => {
		state.vnodes = parseInt(slider.value, 10);
		document.getElementById("vnodes-out").textContent = slider.value;
		clearTimeout(timer);
		timer = setTimeout(refresh, 80);
	});
	document.getElementById("algo").addEventListener("change", (e) => {
		state.algo = e.target.value;
		slider.disabled = !(state.algo === "ring" || state.algo === "bounded");
		refresh();
	});
	document.getElementById("add").addEventListener("click", () => {
		if (state.nodes.length >= 16) return;
		changeTo(state.nodes.concat([nextName()]));
	});
	document.getElementById("lookup").addEventListener("submit", (e) => {
		e.preventDefault();
		state.lookedUp = document.getElementById("key").value;
		refresh();
	});
	document.getElementById("run").addEventListener("click", runClock);
	refresh();
	runClock();
});
