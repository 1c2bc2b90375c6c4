// quoteclip's player card for signed clip links: <quote-clip src="CLIP LINK" poster="POSTER LINK"
// download="DOWNLOAD LINK"></quote-clip>, served by quoteclip at /embed.js. No dependencies, no key: the links
// are signed by the site's server (docs/websites.md). The poster is shown (loaded lazily) until play; the clip is
// requested only when played (a page of a thousand quotes costs a thousand posters and no clip); while the
// service renders it the card says so, and a request answered 503 past the service's hold is tried again.
//
// Optional attributes: brand="StarZero" (the watermark named under the player; default: the one the link names),
// crossorigin="anonymous" (passed to the <video>: a page that draws its frames on a canvas; with an S3 store the
// bucket must then allow the page's origin too).
(() => {
  if (typeof customElements === "undefined" || customElements.get("quote-clip")) return;

  const RETRIES = 8; // tries of a clip the service is still rendering, each after its Retry-After
  const REFUSED = new Set([403, 410, 422]); // a link refused, expired, or a clip that cannot be rendered

  const STYLE = `
    :host { display: block; max-width: 640px; font: 14px/1.4 system-ui, sans-serif; color: #1d2430; }
    .card { border: 1px solid #d8dde6; border-radius: 10px; overflow: hidden; background: #fff; }
    .player { position: relative; background: #14181f; aspect-ratio: var(--aspect, 16 / 9); }
    video, img.poster { position: absolute; inset: 0; width: 100%; height: 100%; object-fit: contain; }
    img.poster[hidden], video[hidden], .state[hidden], button.play[hidden] { display: none; }
    button.play { position: absolute; inset: 0; margin: auto; width: 64px; height: 64px; border-radius: 50%;
      border: 0; background: rgba(0, 0, 0, .6); color: #fff; font-size: 26px; cursor: pointer; }
    .state { position: absolute; left: 0; right: 0; bottom: 0; padding: 6px 10px; color: #fff;
      background: rgba(0, 0, 0, .65); font-size: 13px; }
    .meta { display: flex; gap: 10px; align-items: center; padding: 8px 12px; }
    .time { font-variant-numeric: tabular-nums; }
    .length { color: #5b6472; }
    a.download { margin-left: auto; padding: 6px 12px; border-radius: 6px; background: #1f6feb; color: #fff;
      text-decoration: none; white-space: nowrap; }
    a.download[hidden] { display: none; }
    .foot { padding: 0 12px 10px; color: #5b6472; font-size: 12px; }
  `;

  // The link's clip: its payload is base64url JSON (short names: a start, b end in ms, w watermark, p profile,
  // q quality). Only for the labels; the service checks the signature.
  function payload(link) {
    try {
      const part = new URL(link, location.href).pathname.split("/").pop().split(".")[0];
      const text = atob(part.replace(/-/g, "+").replace(/_/g, "/"));
      return JSON.parse(new TextDecoder().decode(Uint8Array.from(text, (c) => c.charCodeAt(0))));
    } catch {
      return {};
    }
  }

  function clock(seconds) {
    const s = Math.max(0, Math.floor(seconds || 0));
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }

  const SIZES = { landscape: [1280, 720], vertical: [720, 1280], square: [720, 720], portrait: [720, 900] };

  class QuoteClip extends HTMLElement {
    static get observedAttributes() {
      return ["src", "poster", "download", "brand"];
    }

    constructor() {
      super();
      const root = this.attachShadow({ mode: "open" });
      root.innerHTML = `<style>${STYLE}</style>
        <div class="card" part="card">
          <div class="player">
            <img class="poster" alt="" loading="lazy" decoding="async">
            <video playsinline preload="none" hidden></video>
            <button class="play" type="button" aria-label="Play the quote">&#9654;</button>
            <div class="state" role="status" hidden></div>
          </div>
          <div class="meta">
            <span class="time">0:00 / 0:00</span><span class="length"></span>
            <a class="download" part="download"></a>
          </div>
          <div class="foot"></div>
        </div>`;
      this.$ = (selector) => root.querySelector(selector);
      this.video = this.$("video");
      this.tries = 0;
      this.$("button.play").addEventListener("click", () => this.play());
      // a poster still rendering past the service's hold (503): asked again a few times
      this.$("img.poster").addEventListener("error", (e) => {
        const img = e.target;
        const tries = Number(img.dataset.tries || 0);
        if (tries < RETRIES && img.getAttribute("src")) {
          img.dataset.tries = String(tries + 1);
          setTimeout(() => { img.src = `${this.getAttribute("poster")}`; }, 2000);
        }
      });
      const v = this.video;
      v.addEventListener("loadedmetadata", () => this.labels());
      v.addEventListener("timeupdate", () => this.labels());
      v.addEventListener("playing", () => this.state("playing"));
      v.addEventListener("pause", () => { if (!v.ended && this.dataset.state === "playing") this.state("paused"); });
      v.addEventListener("ended", () => this.state("ended"));
      v.addEventListener("waiting", () => { if (v.readyState < 3) this.state(v.currentTime ? "buffering" : "rendering"); });
      v.addEventListener("error", () => this.failed());
    }

    connectedCallback() {
      this.reset();
    }

    attributeChangedCallback() {
      if (this.isConnected) this.reset();
    }

    reset() {
      const link = this.getAttribute("src") || "";
      this.clip = payload(link);
      const [w, h] = SIZES[this.clip.p || "landscape"] || SIZES.landscape;
      this.style.setProperty("--aspect", `${w} / ${h}`);
      const poster = this.$("img.poster");
      const posterLink = this.getAttribute("poster");
      if (posterLink) poster.src = posterLink;
      poster.hidden = !posterLink;
      const a = this.$("a.download");
      a.href = this.getAttribute("download") || "";
      a.hidden = !this.getAttribute("download");
      this.video.removeAttribute("src");
      this.video.hidden = true;
      this.$("button.play").hidden = false;
      this.tries = 0;
      this.labels();
      this.state("idle");
    }

    labels() {
      const v = this.video;
      // The quote's length is the link's own (its end less its start): a clip played from its stream while it
      // renders has a duration that grows with what has come so far.
      const signed = ((this.clip.b || 0) - (this.clip.a || 0)) / 1000;
      const quote = signed > 0 ? signed : Number.isFinite(v.duration) && v.duration > 0 ? v.duration : 0;
      const [w, h] = SIZES[this.clip.p || "landscape"] || SIZES.landscape;
      const half = this.clip.q === "preview" ? 2 : 1;
      const lines = v.videoHeight ? Math.min(v.videoWidth, v.videoHeight) : Math.min(w, h) / half;
      const brand = this.getAttribute("brand") || this.clip.w;
      this.$(".time").textContent = `${clock(v.currentTime)} / ${clock(quote)}`;
      this.$(".length").textContent = `exact quote · ${quote.toFixed(1)}s`;
      this.$("a.download").textContent = `Download ${lines}p mp4`;
      this.$(".foot").textContent = [`${lines}p mp4`, "rendered on demand", brand ? `${brand} watermark` : ""]
        .filter(Boolean).join(" · ");
    }

    state(name, text) {
      if (name === this.dataset.state && !text) return;
      this.dataset.state = name;
      const shown = this.$(".state");
      clearInterval(this.ticking);
      if (name === "rendering") {
        const began = Date.now();
        const say = () => { shown.textContent = `rendering… ${Math.round((Date.now() - began) / 1000)} s`; };
        say();
        this.ticking = setInterval(say, 1000);
      } else if (text) {
        shown.textContent = text;
      }
      shown.hidden = !(name === "rendering" || text);
      if (name === "playing") {
        this.$("img.poster").hidden = true;
        this.$("button.play").hidden = true;
        this.video.controls = true;
      }
      this.dispatchEvent(new CustomEvent("quote-clip-state", { detail: name }));
    }

    play() {
      const v = this.video;
      v.hidden = false;
      this.$("button.play").hidden = true;
      if (!v.getAttribute("src") || v.error) { // (played again after an error: asked afresh)
        const cross = this.getAttribute("crossorigin");
        if (cross !== null) v.crossOrigin = cross;
        this.tries = 0;
        v.src = this.getAttribute("src");
      }
      if (v.readyState < 3) this.state("rendering");
      v.play().catch(() => {}); // (an error is the video's "error" event)
    }

    // The clip's request failed: the service's hold passed (503) or the network did. Ask the link (a HEAD never
    // starts a render) whether to try again: not for a link refused or a clip that cannot be rendered.
    async failed() {
      const link = this.getAttribute("src");
      let status = 0;
      let wait = 2;
      try {
        const r = await fetch(link, { method: "HEAD" });
        status = r.status;
        wait = Number(r.headers.get("Retry-After")) || wait;
      } catch {
        // a redirect to a bucket without CORS for this page: the clip is stored, try the video again
      }
      if (REFUSED.has(status) || this.tries >= RETRIES) {
        this.state("error", status === 410 ? "this link has expired" : "this clip cannot be played");
        this.$("button.play").hidden = false;
        return;
      }
      this.tries += 1;
      setTimeout(() => {
        const v = this.video;
        v.removeAttribute("src");
        v.load();
        v.src = link;
        v.play().catch(() => {});
      }, wait * 1000);
    }
  }

  customElements.define("quote-clip", QuoteClip);
})();
