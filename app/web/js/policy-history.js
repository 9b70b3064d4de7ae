// The policy's versions, newest first (`GET /v1/policy/versions`): who replaced it and when, so
// that a change is never anonymous; the first row is the version in force.

import { api } from "./api.js";
import { byId, el } from "./dom.js";

const VERSIONS_SHOWN = 20;

export class PolicyHistory {
  constructor() {
    this.body = byId("policy-history");
  }

  async refresh() {
    const { data } = await api(`v1/policy/versions?limit=${VERSIONS_SHOWN}`);
    this.body.replaceChildren(
      ...data.map((version, index) =>
        el(
          "tr",
          { dataset: { version: String(version.id) } },
          el("td", {}, `#${version.id}`, index === 0 ? el("span", { class: "muted" }, " in force") : []),
          el("td", {}, version.author),
          el("td", { title: version.created_at }, new Date(version.created_at).toLocaleString()),
          el("td", {}, version.document.default),
          el("td", {}, String(version.document.rules.length)),
        ),
      ),
    );
  }

  clear() {
    this.body.replaceChildren();
  }
}
