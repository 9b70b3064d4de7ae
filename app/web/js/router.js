// The console's addresses: `#/` (approvals and executions), `#/policy`, and
// `#/executions/{id}`, a deep link that opens that execution in a tab of its own.

const EXECUTION_ROUTE = /^#\/executions\/([^/?#]+)$/;

export function parseRoute(hash) {
  const execution = EXECUTION_ROUTE.exec(hash);
  if (execution) return { name: "execution", id: decodeURIComponent(execution[1]) };
  if (hash === "#/policy") return { name: "policy" };
  return { name: "overview" };
}

export function executionHref(id) {
  return `#/executions/${encodeURIComponent(id)}`;
}

export function go(href) {
  if (location.hash === href) {
    // Same address (a tab closed and opened again): hashchange would not fire.
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  } else {
    location.hash = href;
  }
}
