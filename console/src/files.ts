/**
 * The file browser of a sandbox: a directory's entries, into folders and
 * up, a file downloaded, a file uploaded from the browser.
 */
import type { FileInfo } from "../../sdk/typescript/src/models.js";
import type { Sandbox } from "../../sdk/typescript/src/sandbox.js";
import { Status, bytes, button, cell, h, when } from "./dom.js";

/** The parent of an absolute path ("/" for "/" itself). */
function parent(path: string): string {
  const p = path.replace(/\/+$/, "");
  const i = p.lastIndexOf("/");
  return i <= 0 ? "/" : p.slice(0, i);
}

function join(dir: string, name: string): string {
  return dir.replace(/\/+$/, "") + "/" + name;
}

export function fileBrowser(sb: Sandbox): HTMLElement {
  const status = new Status("files");
  let dir = "/root";
  const path = h("input", { id: "files-path", type: "text", value: dir, "aria-label": "Directory", spellcheck: "false" });
  const body = h("tbody", { id: "file-rows" });
  const upload = h("input", { id: "files-upload", type: "file", "aria-label": "File to upload" });

  const show = async (to: string) => {
    const entries = await status.run(`Listing ${to}…`, () => sb.files.list(to), (l) => `${to}: ${l.length} entries.`);
    if (!entries) return;
    dir = to;
    path.value = to;
    body.replaceChildren(...entries.map(row));
  };
  const download = async (f: FileInfo) => {
    const data = await status.run(`Downloading ${f.path}…`, () => sb.files.read(f.path), (d) => `Downloaded ${f.path} (${bytes(d.byteLength)}).`);
    if (!data) return;
    const url = URL.createObjectURL(new Blob([data as Uint8Array<ArrayBuffer>]));
    const a = h("a", { href: url, download: f.name, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  };
  const row = (f: FileInfo) =>
    h(
      "tr",
      { "data-file": f.name, "data-type": f.type },
      cell("Name", f.type === "dir"
        ? button(f.name + "/", () => void show(f.path), { "aria-label": `Open folder ${f.name}` })
        : f.name + (f.symlink_target ? ` → ${f.symlink_target}` : "")),
      cell("Size", f.type === "dir" ? "—" : bytes(f.size)),
      cell("Permissions", f.permissions),
      cell("Owner", f.owner),
      cell("Modified", when(f.modified_at)),
      cell("", f.type === "file" ? button("Download", () => void download(f), { "aria-label": `Download ${f.name}` }) : ""),
    );

  const go = h("form", { class: "row", "aria-label": "Go to a directory" }, path, h("button", { type: "submit" }, "Go"), button("Up", () => void show(parent(dir))));
  go.addEventListener("submit", (e) => {
    e.preventDefault();
    void show(path.value.trim() || "/");
  });
  const send = h("form", { class: "row", id: "upload-form", "aria-label": "Upload a file" }, upload, h("button", { type: "submit", id: "upload-submit" }, "Upload here"));
  send.addEventListener("submit", async (e) => {
    e.preventDefault();
    const file = upload.files?.[0];
    if (!file) {
      status.error(new Error("Choose a file to upload first."));
      return;
    }
    const to = join(dir, file.name);
    const done = await status.run(`Uploading ${file.name}…`, () => sb.files.write(to, file), (f) => `Uploaded ${f.path} (${bytes(f.size)}).`);
    if (done) {
      upload.value = "";
      const ok = status.el.textContent ?? "";
      await show(dir);
      status.ok(ok);
    }
  });
  void show(dir);
  return h(
    "div",
    { id: "files" },
    go,
    h("table", { "aria-label": "Files" }, h("thead", {}, h("tr", {}, ...["Name", "Size", "Permissions", "Owner", "Modified", ""].map((c) => h("th", { scope: "col" }, c)))), body),
    send,
    status.el,
  );
}
