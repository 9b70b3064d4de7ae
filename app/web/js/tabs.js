// The tab bar: Overview, Policy, and one tab per open execution (several at once, each a
// full-window terminal that keeps streaming while another tab is shown). The address decides
// which tab is shown (router.js); closing a tab ends its stream.

import { byId, el, visibleString } from "./dom.js";
import { ExecutionView } from "./execution-view.js";
import { executionHref, go } from "./router.js";

const LABEL_CHARS = 28;

function shortLabel(command) {
  const line = visibleString(command.split("\n", 1)[0]);
  return line.length > LABEL_CHARS ? `${line.slice(0, LABEL_CHARS - 1)}…` : line;
}

export class Tabs {
  constructor({ onExecutionChanged }) {
    this.onExecutionChanged = onExecutionChanged;
    this.nav = byId("tabs");
    this.list = byId("tab-list");
    this.panels = { overview: byId("overview"), policy: byId("policy") };
    this.viewsRoot = byId("execution-views");
    this.template = byId("execution-view-template");
    this.views = new Map(); // execution id → { view, tab }
    this.current = null;
    this.mayControl = () => false;
  }

  // mayControl(execution): whether the signed-in caller may drive an execution (ExecutionView).
  start({ mayControl }) {
    this.mayControl = mayControl;
  }

  show(route) {
    if (route.name === "execution") this.#ensureView(route.id);
    const key = route.name === "execution" ? `execution:${route.id}` : route.name;
    this.current = key;
    document.body.dataset.route = route.name;
    for (const [name, panel] of Object.entries(this.panels)) panel.hidden = name !== route.name;
    for (const [id, { view }] of this.views) view.show(key === `execution:${id}`);
    for (const tab of this.list.querySelectorAll(".tab")) {
      const selected = tab.dataset.key === key || tab.dataset.route === key;
      tab.classList.toggle("selected", selected);
      tab.querySelector("[role=tab]").setAttribute("aria-selected", String(selected));
    }
  }

  closeAll() {
    for (const id of [...this.views.keys()]) this.#close(id, { navigate: false });
  }

  #ensureView(id) {
    if (this.views.has(id)) return;
    const link = el("a", { role: "tab", href: executionHref(id), title: id }, shortLabel(id));
    const tab = el(
      "span",
      { class: "tab execution-tab", dataset: { key: `execution:${id}`, executionId: id } },
      link,
      el(
        "button",
        {
          type: "button",
          class: "tab-close",
          "aria-label": `Close ${id}`,
          onclick: () => this.#close(id, { navigate: true }),
        },
        "×",
      ),
    );
    const view = new ExecutionView(id, {
      template: this.template,
      onChanged: () => this.onExecutionChanged(),
      mayControl: (execution) => this.mayControl(execution),
      onLabel: (command) => {
        link.textContent = shortLabel(command);
        link.title = `${visibleString(command)}\n${id}`;
      },
    });
    view.root.setAttribute("aria-label", `Execution ${id}`);
    this.viewsRoot.append(view.root);
    this.list.append(tab);
    this.views.set(id, { view, tab });
    view.open();
  }

  #close(id, { navigate }) {
    const entry = this.views.get(id);
    if (!entry) return;
    entry.view.close();
    entry.tab.remove();
    this.views.delete(id);
    if (navigate && this.current === `execution:${id}`) go("#/");
  }
}
