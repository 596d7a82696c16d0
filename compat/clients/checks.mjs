// A tiny check runner for the Node compat clients (the Python one is checks.py): each check
// prints `ok NAME` or `FAIL NAME: error`; `finish()` exits 1 if any failed.
export const BASE_URL = process.env.COMPAT_BASE_URL; // the proxy's /v1
export const MODEL = process.env.COMPAT_MODEL || "sim-model";
export const API_KEY = process.env.COMPAT_API_KEY || "compat-key";

let failed = 0;

export async function check(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (error) {
    failed += 1;
    const detail = String(error && error.stack && process.env.COMPAT_VERBOSE ? error.stack
      : (error && error.message) || error).replace(/\s+/g, " ").slice(0, 600);
    console.log(`FAIL ${name}: ${detail}`);
  }
}

export function expect(condition, message) {
  if (!condition) throw new Error(message);
}

export function finish() {
  process.exit(failed ? 1 : 0);
}
