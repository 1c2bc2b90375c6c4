// quoteclip's link signer in JavaScript: the same links, byte for byte, as the Python signer
// (quoteclip/links.py), with Web Crypto only: Deno, Node 20+, edge workers, browsers (never ship a secret to one).
//
//   import { signLink } from "./signer.js";
//   const href = await signLink(
//     { source: "https://www.youtube.com/watch?v=Dkm0sjuzgPU", start: "18:54.0", end: "19:01.0",
//       caption: "This weird scheduling…", watermark: "StarZero" },
//     { keyId: "starzero", secret: process.env.QUOTECLIP_SITE_SECRET, base: "https://clips.example.com" });

const VERSION = "quoteclip-link-1";
const VARIANTS = { clip: "mp4", download: "mp4", poster: "jpg", captions: "vtt" };
// field → [short name, default]
const FIELDS = {
  source: ["s", null], start: ["a", null], end: ["b", null], caption: ["c", ""], watermark: ["w", null],
  logo: ["l", null], profile: ["p", "landscape"], fit: ["f", "pad"], style: ["y", "boxed"],
  quality: ["q", "final"], variant: ["v", "clip"], expires: ["x", null],
};
const CHOICES = {
  profile: ["landscape", "vertical", "square", "portrait"], fit: ["pad", "blur", "center", "speaker"],
  style: ["clean", "bold-outline", "boxed", "karaoke"], quality: ["final", "preview"],
  variant: Object.keys(VARIANTS),
};
const TIMECODE = /^(?:(\d+):)??(?:(\d+):)?(\d+)(?:\.(\d{1,3}))?$/;

export class LinkError extends Error {}

// Integer milliseconds from seconds (a number) or "MM:SS(.fff)" / "HH:MM:SS(.fff)", to the millisecond.
export function milliseconds(value, field) {
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value < 0) throw new LinkError(`${field} must be a finite time of at least 0`);
    const ms = Math.round(value * 1000);
    if (Math.abs(value * 1000 - ms) > 1e-6) throw new LinkError(`${field} must be given to the millisecond`);
    return ms;
  }
  if (typeof value !== "string") throw new LinkError(`${field} must be seconds or HH:MM:SS(.fff)`);
  const m = TIMECODE.exec(value.trim());
  if (!m) throw new LinkError(`${field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff) to the millisecond`);
  let [, hours, minutes, seconds, fraction] = m;
  if (hours !== undefined && minutes === undefined) [hours, minutes] = [undefined, hours];
  if ((minutes !== undefined && Number(seconds) >= 60) || (hours !== undefined && Number(minutes ?? 0) >= 60)) {
    throw new LinkError(`${field} must be seconds, MM:SS(.fff) or HH:MM:SS(.fff)`);
  }
  const total = (Number(hours ?? 0) * 60 + Number(minutes ?? 0)) * 60 + Number(seconds);
  return total * 1000 + Number((fraction ?? "").padEnd(3, "0"));
}

// The clip as a link carries it: short names, times in ms, text trimmed, defaults left out.
export function canonical(clip) {
  const unknown = Object.keys(clip).filter((k) => !(k in FIELDS)).sort();
  if (unknown.length) throw new LinkError(`a link cannot carry ${unknown.join(", ")}`);
  const data = { ...clip };
  if (data.watermark && typeof data.watermark === "object") {
    const keys = Object.keys(data.watermark);
    if (keys.length !== 1 || !["text", "logo"].includes(keys[0])) {
      throw new LinkError("watermark: a link carries a text mark or a logo, nothing else about it");
    }
    [data.watermark, data.logo] = [data.watermark.text ?? null, data.watermark.logo ?? data.logo ?? null];
  }
  if (data.style && typeof data.style === "object") {
    if (Object.keys(data.style).some((k) => k !== "preset")) throw new LinkError("style: the preset only");
    data.style = data.style.preset ?? null;
  }
  const out = {};
  for (const [name, [short, fallback]] of Object.entries(FIELDS)) {
    let value = data[name] ?? null;
    if (name === "start" || name === "end") {
      if (value === null) throw new LinkError(`${name}: required`);
      value = milliseconds(value, name);
    } else if (name === "expires") {
      if (value !== null && !(Number.isInteger(value) && value >= 0)) throw new LinkError("expires: unix seconds");
    } else if (value !== null) {
      if (typeof value !== "string") throw new LinkError(`${name} must be text`);
      if (!value.isWellFormed()) throw new LinkError(`${name} must be well-formed text`);
      value = value.trim();
      if (CHOICES[name] && !CHOICES[name].includes(value)) {
        throw new LinkError(`${name} must be one of ${CHOICES[name].join(", ")}`);
      }
    }
    if (name === "source" && !value) throw new LinkError("source: required");
    if (value !== null && value !== fallback && value !== "") out[short] = value;
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

export async function signature(secret, keyId, payload) {
  const key = await crypto.subtle.importKey(
    "raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"],
  );
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${VERSION}:${keyId}:${payload}`));
  return base64url(new Uint8Array(mac).slice(0, 16));
}

// A key whose links live `lifetime` seconds: the expiry, rounded up so links made minutes apart are one link.
export function roundedExpiry(lifetime, now = Date.now() / 1000) {
  const step = Math.max(60, Math.min(3600, Math.floor(lifetime / 10)));
  return Math.ceil((now + lifetime) / step) * step;
}

export async function signLink(clip, { keyId, secret, base = "", variant = "clip", expires = null }) {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(keyId)) throw new LinkError("key id: 1-64 letters, digits, - or _");
  const payload = encode(canonical({ ...clip, variant, expires }));
  const sig = await signature(secret, keyId, payload);
  return `${base.replace(/\/+$/, "")}/l/${keyId}/${payload}.${sig}.${VARIANTS[variant]}`;
}
