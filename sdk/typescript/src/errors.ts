/**
 * The one error class of the SDK. An error answer of the API
 * (`{"error":{"code","message"}}`) becomes a WarrenError with the API's code;
 * failures without an answer get codes of the SDK's own.
 *
 * Codes of the API (docs/API.md, api/error.go) and what they mean:
 * - `bad_request` (400): an invalid request: a path that climbs above `/`,
 *   an unknown signal, a restore count out of 1-256, a bad network entry.
 * - `unauthorized` (401): no API key, or a bad one.
 * - `forbidden` (403): the key may not do this (admin-only routes).
 * - `not_found` (404): no such sandbox, snapshot, process, file, template or
 *   key; another tenant's sandbox or snapshot is reported the same way.
 * - `method_not_allowed` (405): an SDK and server version mismatch.
 * - `conflict` (409): the state forbids it, e.g. the sandbox is not running
 *   (`isSandboxGone` tells that case), a non-empty directory removed
 *   without `recursive`, a pty exec past 64 terminals.
 * - `payload_too_large` (413): a JSON request over 1 MiB (a large `stdin`).
 * - `too_many_requests` (429): a bound on concurrent calls or a tenant's
 *   quota was reached.
 * - `internal` (500): the server failed; the detail is in its log under
 *   `requestId`.
 * - `bad_gateway` (502): nothing answers on a sandbox's port.
 * - `unavailable` (503): no capacity, a runtime missing, a proxy down.
 * - `timeout` (504): e.g. a snapshot's `wait` or a process's wait ran out.
 * - `insufficient_storage` (507): the node cannot promise the disk.
 *
 * Codes of the SDK (status 0):
 * - `network`: the server could not be reached or the connection broke; for
 *   a call that is not retried (exec, stdin, upload) the outcome is unknown.
 * - `timeout`: no answer within the client's timeout, or `waitSnapshot`
 *   ran out of time.
 * - `stream_broken`: an exec, process or build stream ended before its end.
 * - `configuration`: a bad URL, or no fetch.
 */
export class WarrenError extends Error {
  /** The API's error code, or one of the SDK's (see above). */
  readonly code: string;
  /** The HTTP status of the answer; 0 when there was none. */
  readonly status: number;
  /** The server's X-Request-Id of the failed call, to find it in its log. */
  readonly requestId: string;

  constructor(message: string, code: string, status = 0, requestId = "", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "WarrenError";
    this.code = code;
    this.status = status;
    this.requestId = requestId;
  }

  /** Whether the error says the sandbox is not running any more (deleted,
   * expired, failed): a 409 about the sandbox's own state. A paused one is
   * not gone: it can be resumed. */
  get isSandboxGone(): boolean {
    return this.code === "conflict" && GONE.test(this.message);
  }
}

// The server words a conflict about the sandbox's own state this way
// ("sandbox sb-x is not running (state stopped)", "sandbox sb-x is stopped").
// A sandbox starting, paused ("sandbox sb-x is paused: resume it first") or
// moving is not gone: it runs again.
const GONE = /^sandbox \S+ is (not running(?! \(state (starting|paused|moving)\))|stopped|failed)\b/;

const CODE_BY_STATUS: Record<number, string> = {
  400: "bad_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  413: "payload_too_large",
  429: "too_many_requests",
  500: "internal",
  502: "bad_gateway",
  503: "unavailable",
  504: "timeout",
  507: "insufficient_storage",
};

/**
 * The error of an answer with status and body. A body in warren's error
 * shape gives the code and message; any other body (a proxy's page) gets the
 * code of its status (`unavailable` for another 5xx, `bad_request` for
 * anything else) and `HTTP <status>` as the message.
 */
export function errorFromResponse(status: number, body: string, requestId = ""): WarrenError {
  let code = "";
  let message = "";
  try {
    const doc: unknown = JSON.parse(body);
    const err = doc !== null && typeof doc === "object" ? (doc as { error?: unknown }).error : undefined;
    if (err !== null && typeof err === "object") {
      const e = err as { code?: unknown; message?: unknown };
      code = typeof e.code === "string" ? e.code : "";
      message = typeof e.message === "string" ? e.message : "";
    }
  } catch {
    // Not JSON: a proxy's page, say. The status speaks for it.
  }
  if (!code) code = CODE_BY_STATUS[status] ?? (status >= 500 ? "unavailable" : "bad_request");
  if (!message) message = `HTTP ${status}`;
  return new WarrenError(message, code, status, requestId);
}
