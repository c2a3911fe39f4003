/**
 * The console's entry: sign-in, and the hash routes to the pages
 * (#/sandboxes, #/sandboxes/ID, #/snapshots, #/fleet). Every failure ends
 * in words on the page, never a blank one.
 */
import { Status, button, errorText, h } from "./dom.js";
import { fleetPage } from "./fleet.js";
import { sandboxPage } from "./sandbox.js";
import { sandboxesPage } from "./sandboxes.js";
import { type PageContext, clientFor, currentKey, signIn, signOut } from "./session.js";
import { snapshotsPage } from "./snapshots.js";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
const banner = document.getElementById("banner") as HTMLElement;

/** The page being shown's controller: aborted when another replaces it. */
let current = new AbortController();

function showBanner(e: unknown): void {
  banner.textContent = errorText(e);
  banner.hidden = false;
}

window.addEventListener("error", (e) => showBanner(e.error ?? e.message));
window.addEventListener("unhandledrejection", (e) => showBanner(e.reason));

function signInPage(): void {
  nav.hidden = true;
  const status = new Status("sign-in");
  const input = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h(
    "form",
    { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("p", {}, "The API key is kept in this tab's session storage only, until you sign out or close the tab."),
    h("label", { for: "api-key" }, "API key"),
    input,
    h("div", { class: "row" }, h("button", { type: "submit" }, "Sign in")),
    status.el,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) {
      status.error(new Error("Type an API key first."));
      return;
    }
    status.busy("Checking the key…");
    try {
      await signIn(key);
      status.clear();
      if (!location.hash || location.hash === "#/") location.hash = "#/sandboxes";
      route();
    } catch (err) {
      status.error(err);
    }
  });
  main.replaceChildren(form);
  input.focus();
}

function route(): void {
  current.abort();
  current = new AbortController();
  banner.hidden = true;
  const key = currentKey();
  if (!key) {
    signInPage();
    return;
  }
  nav.hidden = false;
  const hash = location.hash || "#/sandboxes";
  for (const a of nav.querySelectorAll("a")) {
    if (hash.startsWith(a.getAttribute("href") ?? "-")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const ctx: PageContext = { main, warren: clientFor(key), key, signal: current.signal };
  main.replaceChildren(h("p", {}, "Loading…"));
  const parts = hash.slice(2).split("/").map(decodeURIComponent);
  let page: Promise<void>;
  if (parts[0] === "sandboxes" && parts[1]) page = sandboxPage(ctx, parts[1]);
  else if (parts[0] === "snapshots") page = snapshotsPage(ctx);
  else if (parts[0] === "fleet") page = fleetPage(ctx);
  else page = sandboxesPage(ctx);
  page.catch((e) => {
    if (ctx.signal.aborted) return;
    main.replaceChildren(h("h1", {}, "This page could not be shown"), h("p", { class: "status error", role: "alert" }, errorText(e)));
  });
}

document.getElementById("sign-out")?.replaceWith(
  button("Sign out", () => {
    signOut();
    current.abort();
    location.hash = "";
    route();
  }, { id: "sign-out" }),
);
window.addEventListener("hashchange", route);
route();
