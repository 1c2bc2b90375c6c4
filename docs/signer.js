// quoteclip's link signer in JavaScript: the same links, byte for byte, as the Python signer
// (quoteclip/links.py), following the canonical form docs/websites.md writes out, with Web Crypto only: Deno,
// Node 20+, edge workers, browsers (never ship a secret to one).
//
//   import { signLink } from "./signer.js";
//   const href = await signLink(
//     { source: "https://www.youtube.com/watch?v=Dkm0sjuzgPU", start: "18:54.0", end: "19:01.0",
//       caption: "This weird scheduling…", watermark: "StarZero" },
//     { site: "starzero", keyId: "k2", secret: process.env.QUOTECLIP_SITE_SECRET, base: "https://clips.example.com" });
//
// (A key listed without an id, QUOTECLIP_SITE_KEYS=starzero:SECRET, signs with { site: "starzero" } alone, or
// { keyId: "starzero" } as signers written before key ids do.)

const VERSION = "quoteclip-link-1";
const MAX_SECONDS = 86400; // the latest start or end: 24 hours
const MAX_MS = MAX_SECONDS * 1000;
const MAX_LIFETIME = 315360000; // the latest expiry: ten years after now
const MAX_PAYLOAD = 4096; // characters of base64url
const ID = /^[A-Za-z0-9_-]{1,64}$/; // a site id, and a key id
// Trimmed from both ends of a text: TAB, LF, VT, FF, CR, SPACE, and nothing else (not String.prototype.trim()).
const EDGES = /^[\t\n\v\f\r ]+|[\t\n\v\f\r ]+$/g;
// A time as text: [[H:]M:]S[.fff] in ASCII digits.
const TIMECODE = /^(?:([0-9]{1,12}):)??(?:([0-9]{1,12}):)?([0-9]{1,12})(?:\.([0-9]{1,3}))?$/;
const VARIANTS = new Map([["clip", "mp4"], ["download", "mp4"], ["poster", "jpg"], ["captions", "vtt"]]);
// field → [short name, default] (a Map: no name inherited from Object.prototype is a field)
const FIELDS = new Map([
  ["source", ["s", null]], ["start", ["a", null]], ["end", ["b", null]], ["caption", ["c", ""]],
  ["watermark", ["w", null]], ["logo", ["l", null]], ["profile", ["p", "landscape"]], ["fit", ["f", "pad"]],
  ["style", ["y", "boxed"]], ["quality", ["q", "final"]], ["variant", ["v", "clip"]], ["expires", ["x", null]],
]);
const CHOICES = new Map([
  ["profile", ["landscape", "vertical", "square", "portrait"]], ["fit", ["pad", "blur", "center", "speaker"]],
  ["style", ["clean", "bold-outline", "boxed", "karaoke"]], ["quality", ["final", "preview"]],
  ["variant", [...VARIANTS.keys()]],
]);

export class LinkError extends Error {}

const isObject = (value) => typeof value === "object" && value !== null && !Array.isArray(value);
export const trim = (text) => text.replace(EDGES, "");

// Integer milliseconds from seconds (a number) or "S(.fff)", "M:SS(.fff)", "H:MM:SS(.fff)", to the millisecond.
export function milliseconds(value, field) {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new LinkError(`${field} must be a finite time of at least 0`);
    if (value < 0) throw new LinkError(`${field} must not be negative`);
    if (value > MAX_SECONDS) throw new LinkError(`${field} must be at most ${MAX_SECONDS} s (24:00:00)`);
    const scaled = value * 1000;
    const ms = Math.round(scaled);
    if (Math.abs(scaled - ms) > 1e-6) throw new LinkError(`${field} must be given to the millisecond`);
    return ms;
  }
  if (typeof value !== "string") throw new LinkError(`${field} must be seconds or HH:MM:SS(.fff)`);
  const m = TIMECODE.exec(trim(value));
  if (!m) throw new LinkError(`${field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff) in ASCII digits`);
  let [, hours, minutes, seconds, fraction] = m;
  if (hours !== undefined && minutes === undefined) [hours, minutes] = [undefined, hours];
  if ((minutes !== undefined && Number(seconds) >= 60) || (hours !== undefined && Number(minutes ?? 0) >= 60)) {
    throw new LinkError(`${field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff)`);
  }
  const total = (Number(hours ?? 0) * 60 + Number(minutes ?? 0)) * 60 + Number(seconds);
  const ms = total * 1000 + Number((fraction ?? "").padEnd(3, "0"));
  if (ms > MAX_MS) throw new LinkError(`${field} must be at most ${MAX_SECONDS} s (24:00:00)`);
  return ms;
}

function oneMember(value, field, names) {
  const keys = Object.keys(value);
  if (keys.length !== 1 || !names.includes(keys[0])) {
    throw new LinkError(`${field}: an object here has exactly one member, ${names.join(" or ")}`);
  }
  return [keys[0], value[keys[0]] ?? null];
}

// The clip as a link carries it: short names, times in ms, text trimmed, empty and default values left out.
export function canonical(clip) {
  if (!isObject(clip)) throw new LinkError("clip must be an object of the fields a link carries");
  const unknown = Object.keys(clip).filter((name) => !FIELDS.has(name)).sort();
  if (unknown.length) throw new LinkError(`a link cannot carry ${unknown.join(", ")}`);
  const data = new Map(Object.entries(clip).filter(([, value]) => value !== null && value !== undefined));
  const mark = data.get("watermark");
  if (isObject(mark)) {
    const [member, value] = oneMember(mark, "watermark", ["text", "logo"]);
    data.delete("watermark");
    if (member === "logo" && value !== null) {
      if (data.has("logo")) throw new LinkError("logo: given twice (as watermark.logo and as logo)");
      data.set("logo", value);
    } else if (member === "text" && value !== null) {
      data.set("watermark", value);
    }
  }
  const style = data.get("style");
  if (isObject(style)) data.set("style", oneMember(style, "style", ["preset"])[1]);
  const out = {};
  for (const [name, [short, fallback]] of FIELDS) {
    let value = data.get(name) ?? null;
    if (value === null) {
      // absent
    } else if (name === "start" || name === "end") {
      value = milliseconds(value, name);
    } else if (name === "expires") {
      if (!Number.isInteger(value) || value < 0) throw new LinkError("expires must be unix seconds");
    } else {
      if (typeof value !== "string") throw new LinkError(`${name} must be text`);
      if (!value.isWellFormed()) throw new LinkError(`${name} must be well-formed text (no lone surrogate)`);
      value = trim(value);
      if (CHOICES.has(name) && !CHOICES.get(name).includes(value)) {
        throw new LinkError(`${name} must be one of ${CHOICES.get(name).join(", ")}`);
      }
    }
    if (value !== null && value !== fallback && value !== "") out[short] = value;
  }
  for (const [name, short] of [["source", "s"], ["start", "a"], ["end", "b"]]) {
    if (!(short in out)) throw new LinkError(`${name}: required`);
  }
  if ("w" in out && "l" in out) throw new LinkError("watermark: a text mark or a logo, not both");
  if (out.b <= out.a) throw new LinkError("end must be after start");
  return out;
}

function base64url(bytes) {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

// base64url of the canonical JSON: keys sorted, no spaces, UTF-8.
export function encode(data) {
  const sorted = Object.fromEntries(Object.keys(data).sort().map((k) => [k, data[k]]));
  return base64url(new TextEncoder().encode(JSON.stringify(sorted)));
}

export async function signature(secret, signer, payload) {
  const key = await crypto.subtle.importKey(
    "raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"],
  );
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${VERSION}:${signer}:${payload}`));
  return base64url(new Uint8Array(mac).slice(0, 16));
}

// A key whose links live `lifetime` seconds: the expiry, rounded up so links made minutes apart are one link.
export function roundedExpiry(lifetime, now = Date.now() / 1000) {
  const step = Math.max(60, Math.min(3600, Math.floor(lifetime / 10)));
  return Math.ceil((now + lifetime) / step) * step;
}

export async function signLink(clip, { site, keyId, secret, base = "", variant = "clip", expires = null }) {
  // The signer segment: "site.keyId", or the site alone for its key without an id ({ keyId } alone: the site).
  const [who, key] = site === undefined ? [keyId, undefined] : [site, keyId];
  if (typeof who !== "string" || !ID.test(who)) throw new LinkError("site: 1-64 letters, digits, - or _");
  if (key !== undefined && key !== null && (typeof key !== "string" || !ID.test(key))) {
    throw new LinkError("key id: 1-64 letters, digits, - or _");
  }
  const signer = key === undefined || key === null ? who : `${who}.${key}`;
  // An unset variable's undefined or "": never an empty key (Web Crypto refuses one, or signs with it).
  if (typeof secret !== "string" || secret === "") {
    throw new LinkError("secret: the site key's secret is missing (text, as QUOTECLIP_SITE_KEYS gives it)");
  }
  if (!secret.isWellFormed()) throw new LinkError("secret: must be well-formed text (no lone surrogate)");
  if (!VARIANTS.has(variant)) throw new LinkError(`variant must be one of ${[...VARIANTS.keys()].join(", ")}`);
  if (!isObject(clip)) throw new LinkError("clip must be an object of the fields a link carries");
  const payload = encode(canonical({ ...clip, variant, expires }));
  if (expires !== null && expires > Date.now() / 1000 + MAX_LIFETIME) {
    throw new LinkError(`expires must be at most ${MAX_LIFETIME} s (ten years) from now`);
  }
  if (payload.length > MAX_PAYLOAD) throw new LinkError(`the clip is too long for a link (over ${MAX_PAYLOAD})`);
  const sig = await signature(secret, signer, payload);
  return `${base.replace(/\/+$/, "")}/l/${signer}/${payload}.${sig}.${VARIANTS.get(variant)}`;
}
