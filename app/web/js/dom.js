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

export function timeEl(iso) {
  if (!iso) return el("span", { class: "muted" }, "—");
  const date = new Date(iso);
  const today = date.toDateString() === new Date().toDateString();
  const label = today
    ? date.toLocaleTimeString()
    : date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" });
  return el("time", { datetime: iso, title: date.toLocaleString() }, label);
}

export function showError(node, error) {
  node.textContent = error ? (error.message ?? String(error)) : "";
}
