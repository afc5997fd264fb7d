/**
 * The message of a Kubernetes API error answer: a Status object's `message`, else the body's text;
 * at most 300 characters, for a log line or an error.
 */
export function apiStatusMessage(body: string): string {
  try {
    const status = JSON.parse(body) as { message?: unknown };
    if (typeof status.message === "string") return status.message.slice(0, 300);
  } catch {
    // not a Status object
  }
  return body.slice(0, 300);
}
