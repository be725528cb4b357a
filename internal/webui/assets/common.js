// Helpers both pages use: building elements, fetching JSON, colours.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

// el builds an element: el("li", {class: "x"}, "text", child). Text is
// always set as text, never parsed as HTML.
function el(tag, attrs, ...children) {
	const svg = ["svg", "g", "circle", "path", "line", "text", "polyline", "title", "polygon"].includes(tag);
	const node = svg ? document.createElementNS(SVG, tag) : document.createElement(tag);
	for (const [k, v] of Object.entries(attrs || {})) {
		if (v === undefined || v === null || v === false) continue;
		if (k === "text") node.textContent = v;
		else if (k === "style") Object.assign(node.style, v); // the CSSOM: the pages' CSP forbids style attributes
		else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
		else node.setAttribute(k, v === true ? "" : String(v));
	}
	for (const c of children) {
		if (c === undefined || c === null) continue;
		node.append(c instanceof Node ? c : document.createTextNode(String(c)));
	}
	return node;
}

// getJSON fetches a document; an answer that is not 2xx throws its error.
async function getJSON(url, init) {
	const res = await fetch(url, Object.assign({cache: "no-store"}, init || {}));
	let body = null;
	try {
		body = await res.json();
	} catch (e) {
		body = null;
	}
	if (!res.ok) {
		const err = new Error((body && body.error) || (res.status + " " + res.statusText));
		err.status = res.status;
		throw err;
	}
	return body;
}

// The Okabe-Ito palette, told apart with any colour vision; then hues.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
function colour(i) {
	if (i < PALETTE.length) return PALETTE[i];
	return "hsl(" + ((i * 137.5) % 360).toFixed(0) + " 60% 45%)";
}

const fmtInt = new Intl.NumberFormat("en-US");
function pct(x, digits) {
	return (100 * x).toFixed(digits === undefined ? 1 : digits) + "%";
}
function ms(ns) {
	return (ns / 1e6).toFixed(1);
}
