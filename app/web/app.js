// Entry point: sign-in, and the panels wired together.

import { api, forgetToken, session, storeToken, storedToken } from "./js/api.js";
import { ApprovalsPanel } from "./js/approvals.js";
import { byId, showError } from "./js/dom.js";
import { ExecutionsPanel } from "./js/executions.js";
import { PolicyPanel } from "./js/policy.js";
import { executionHref, go, parseRoute } from "./js/router.js";
import { ServerInfo } from "./js/server-info.js";
import { Tabs } from "./js/tabs.js";

const signInSection = byId("sign-in");
const signInForm = byId("sign-in-form");
const tokenInput = byId("token-input");
const signInError = byId("sign-in-error");
const workspace = byId("workspace");
const signOutButton = byId("sign-out");
const tabsNav = byId("tabs");
const signedInAs = byId("signed-in-as");

const openExecution = (id) => go(executionHref(id));
const serverInfo = new ServerInfo();
const tabs = new Tabs({ onExecutionChanged: () => executions.refresh() });
const executions = new ExecutionsPanel({
  onOpenExecution: openExecution,
  onRefreshed: () => serverInfo.refresh(),
  selectedId: () => {
    const route = parseRoute(location.hash);
    return route.name === "execution" ? route.id : null;
  },
});
const policy = new PolicyPanel();
const approvals = new ApprovalsPanel({
  onOpenExecution: openExecution,
  onDecided: (approval) => {
    executions.refresh();
    // A remembered decision is a new policy version: show it on the policy page too.
    if (approval.remembered_rule) policy.refresh();
  },
});

let signedIn = false;

async function enter() {
  const info = await api("v1/info");
  const { name, role } = info.caller;
  serverInfo.show(info);
  signedInAs.textContent = `${name} (${role})`;
  signedInAs.dataset.role = role;
  signedInAs.hidden = false;
  signedIn = true;
  signInSection.hidden = true;
  workspace.hidden = false;
  tabsNav.hidden = false;
  signOutButton.hidden = false;
  // What the role may do (docs/api.md#access-and-roles): the console offers nothing else, so no
  // button leads to a 403.
  approvals.start({ canDecide: role !== "agent", canRememberForAll: role === "admin" });
  executions.start({ canRun: role !== "approver" });
  tabs.start({ mayControl: (execution) => role === "admin" || (role === "agent" && execution.owner === name) });
  policy.start({ canEdit: role === "admin" });
  // A deep link followed before signing in opens now.
  tabs.show(parseRoute(location.hash));
}

function leave(message) {
  forgetToken();
  if (signedIn) {
    approvals.stop();
    executions.stop();
    policy.stop();
    tabs.closeAll();
  }
  signedIn = false;
  workspace.hidden = true;
  tabsNav.hidden = true;
  signedInAs.hidden = true;
  signedInAs.textContent = "";
  signOutButton.hidden = true;
  serverInfo.clear();
  signInSection.hidden = false;
  showError(signInError, message ? new Error(message) : null);
  tokenInput.focus();
}

signInForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = tokenInput.value.trim();
  if (!token) return;
  storeToken(token);
  tokenInput.value = "";
  try {
    await enter();
  } catch (error) {
    leave(error.status === 401 ? "That token was refused." : error.message);
  }
});

signOutButton.addEventListener("click", () => leave(null));

window.addEventListener("hashchange", () => {
  if (signedIn) tabs.show(parseRoute(location.hash));
});

session.addEventListener("unauthenticated", () => {
  if (signedIn) leave("The server refused the token; sign in again.");
});

if (storedToken()) {
  enter().catch((error) => leave(error.message));
} else {
  leave(null);
}
