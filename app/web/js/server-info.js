// The header's server line: version and running jobs out of the cap (GET /v1/info). The count
// is read again whenever the executions list is (its refresh tick, Run, a decision, an exit), so
// the header follows what the console already hears about without a poll of its own.

import { api } from "./api.js";
import { byId } from "./dom.js";

export class ServerInfo {
  constructor() {
    this.line = byId("server-info");
    this.reading = null;
    this.again = false;
    this.shown = false;
  }

  show(info) {
    this.shown = true;
    this.line.textContent = `v${info.version} · ${info.running_jobs}/${info.max_jobs} jobs running`;
    this.line.dataset.runningJobs = String(info.running_jobs);
  }

  clear() {
    this.shown = false;
    this.line.textContent = "";
    delete this.line.dataset.runningJobs;
  }

  refresh() {
    if (!this.shown) return;
    // One read at a time; a refresh asked for during a read is one more read after it, since
    // the read in flight may have left before what the caller just heard of (a job started).
    if (this.reading) {
      this.again = true;
      return;
    }
    this.reading = api("v1/info")
      .then((info) => {
        if (this.shown) this.show(info);
      })
      .catch(() => {
        /* the line keeps its last count; the list beside it shows the error */
      })
      .finally(() => {
        this.reading = null;
        if (this.again) {
          this.again = false;
          this.refresh();
        }
      });
  }
}
