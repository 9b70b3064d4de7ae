// DOM building that only ever creates text nodes from data: commands, reasons and output are
// written by agents, so nothing from the server is parsed as HTML.

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`#${id} is missing from the page`);
  return node;
}

// A time as a <time>: today's as the time alone, another day's with its date; `{ dated: true }`
// always with the date, as `YYYY-MM-DD HH:MM` in local time (a list where rows of several days
// sit together and sort by it). The title has the whole local date and time.
export function timeEl(iso, { dated = false } = {}) {
  if (!iso) return el("span", { class: "muted" }, "—");
  const date = new Date(iso);
  const today = date.toDateString() === new Date().toDateString();
  let label;
  if (dated) label = `${isoDate(date)} ${pad(date.getHours())}:${pad(date.getMinutes())}`;
  else if (today) label = date.toLocaleTimeString();
  else label = date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" });
  return el("time", { datetime: iso, title: date.toLocaleString() }, label);
}

const pad = (number) => String(number).padStart(2, "0");
const isoDate = (date) => `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;

export function showError(node, error) {
  node.textContent = error ? (error.message ?? String(error)) : "";
}

// Characters that do not show as themselves (the set of app/core/visible_text.py): controls (C0, tab
// included, DEL, C1), format characters (bidi overrides such as U+202E, zero-width characters, the
// BOM), line and paragraph separators, spaces other than U+0020, unpaired surrogates, private
// use and unassigned code points. An approver must see all of what runs: each is shown as its
// escape (`\r`, `\x1b`, `\u202e`), never interpreted.
const HIDDEN = /(?! )[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/gu;
const NAMED_ESCAPES = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escapeOf(char) {
  if (NAMED_ESCAPES[char]) return NAMED_ESCAPES[char];
  const point = char.codePointAt(0);
  const hex = point.toString(16);
  if (point < 0x100) return `\\x${hex.padStart(2, "0")}`;
  if (point < 0x10000) return `\\u${hex.padStart(4, "0")}`;
  return `\\U${hex.padStart(8, "0")}`;
}

// `text` as nodes: its visible runs as text, each hidden character as a marked
// `<span class="escape">` holding its escape; a line feed is marked and then kept as a break, so
// a break the browser makes to wrap a long line never reads as one of the command's.
export function visibleText(text) {
  const value = String(text ?? "");
  const nodes = [];
  let last = 0;
  for (const match of value.matchAll(HIDDEN)) {
    if (match.index > last) nodes.push(value.slice(last, match.index));
    nodes.push(el("span", { class: "escape" }, escapeOf(match[0])));
    if (match[0] === "\n") nodes.push("\n");
    last = match.index + match[0].length;
  }
  if (last < value.length) nodes.push(value.slice(last));
  return nodes;
}

// The same as one string, for places that take text only (a tooltip, a tab's label).
export function visibleString(text) {
  return String(text ?? "").replace(HIDDEN, escapeOf);
}
