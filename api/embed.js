// quoteclip's player card for signed clip links: <quote-clip src="CLIP LINK" poster="POSTER LINK"
// download="DOWNLOAD LINK"></quote-clip>, served by quoteclip at /embed.js. No dependencies, no key: the links
// are signed by the site's server (docs/websites.md). The poster is shown (loaded lazily) until play; the clip is
// requested only when played (a page of a thousand quotes costs a thousand posters and no clip); while the
// service renders it the card says so, and a request answered 503 past the service's hold is tried again.
//
// A clip still rendering is played from the link's HLS parts (`…/index.m3u8`, its map `init.mp4`, then `1.m4s`,
// `2.m4s`, … as the render makes them) through Media Source Extensions, or ManagedMediaSource where that is what the
// browser has (an iPhone's): every part is appended in order, so the card seeks anywhere in what has been rendered
// while the rest renders. A browser with neither, a clip stored already (its playlist answers 404), a render held
// past the service's hold, or a part that fails: the card plays the link itself, as a <video src> does.
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


  // The RFC 6381 codecs of an init segment's tracks (H.264 and AAC, as the service renders them), in their order:
  // what a SourceBuffer is made for.
  function codecs(init) {
    const found = [];
    const at = (name, from) => {
      for (let i = from; i + 4 <= init.length; i += 1) {
        if (init[i] === name.charCodeAt(0) && String.fromCharCode(...init.subarray(i, i + 4)) === name) return i;
      }
      return -1;
    };
    for (let i = at("avcC", 0); i >= 0; i = at("avcC", i + 4)) {
      found.push(`avc1.${Array.from(init.subarray(i + 5, i + 8), (b) => b.toString(16).padStart(2, "0")).join("")}`);
    }
    if (at("mp4a", 0) >= 0) found.push("mp4a.40.2");
    return found.join(",");
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
      this.session = null; // (a clip being appended stops)
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

    async play() {
      const v = this.video;
      v.hidden = false;
      this.$("button.play").hidden = true;
      if (v.getAttribute("src") && !v.error) {
        if (v.readyState < 3) this.state("rendering");
        v.play().catch(() => {});
        return;
      }
      // (played again after an error: asked afresh)
      const cross = this.getAttribute("crossorigin");
      if (cross !== null) v.crossOrigin = cross;
      this.tries = 0;
      if (v.readyState < 3) this.state("rendering");
      const session = (this.session = {});
      if (!(await this.streamed(session))) {
        if (session !== this.session) return; // (reset meanwhile)
        this.linked(0);
      }
    }

    // The link itself in the <video> (from `at` seconds): a stored clip, or a browser without Media Source.
    linked(at) {
      const v = this.video;
      this.session = null;
      v.src = this.getAttribute("src");
      if (at > 0) v.addEventListener("loadedmetadata", () => { v.currentTime = at; }, { once: true });
      v.play().catch(() => {}); // (an error is the video's "error" event)
    }

    // The clip from its HLS parts through a MediaSource, while it renders: false, before anything is shown, when it
    // cannot be (no MediaSource, no playlist: the clip is stored, or held past the service's hold). A part that fails
    // later hands the card to the link, at the time it had reached.
    async streamed(session) {
      const Source = window.ManagedMediaSource || window.MediaSource;
      const link = this.getAttribute("src") || "";
      if (!Source || !link) return false;
      const part = (name) => `${link}/${name}`;
      const get = async (name) => {
        const r = await fetch(part(name), { cache: "no-store" });
        if (r.status !== 200) throw new Error(`${name}: ${r.status}`);
        return r;
      };
      let listed;
      let init;
      try {
        // (answered once it lists the first part: a player that reloads less often is made to wait for more)
        listed = await (await get("index.m3u8?_HLS_msn=1")).text();
        init = new Uint8Array(await (await get("init.mp4")).arrayBuffer());
      } catch {
        return false;
      }
      const type = `video/mp4; codecs="${codecs(init)}"`;
      if (session !== this.session || !Source.isTypeSupported(type)) return false;
      const v = this.video;
      const media = new Source();
      if (Source === window.ManagedMediaSource) v.disableRemotePlayback = true; // (ManagedMediaSource asks it)
      v.src = URL.createObjectURL(media);
      await new Promise((opened) => media.addEventListener("sourceopen", opened, { once: true }));
      URL.revokeObjectURL(v.src);
      v.play().catch(() => {});
      try {
        const buffer = media.addSourceBuffer(type);
        const append = (data) => new Promise((done, failed) => {
          buffer.addEventListener("updateend", done, { once: true });
          buffer.addEventListener("error", failed, { once: true });
          buffer.appendBuffer(data);
        });
        await append(init);
        let next = 0; // parts appended
        for (;;) {
          const lines = listed.split("\n").map((line) => line.trim());
          const parts = lines.filter((line) => line && !line.startsWith("#"));
          for (; next < parts.length; next += 1) {
            const data = await (await get(parts[next])).arrayBuffer();
            if (session !== this.session) return true;
            await append(data);
          }
          if (lines.includes("#EXT-X-ENDLIST")) break;
          // (a blocking reload: answered once the next part is listed, or the stream has ended)
          listed = await (await get(`index.m3u8?_HLS_msn=${parts.length + 1}`)).text();
          if (session !== this.session) return true;
        }
        if (media.readyState === "open") media.endOfStream();
      } catch {
        if (session === this.session) this.linked(v.currentTime);
      }
      return true;
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
        this.session = null;
        v.removeAttribute("src");
        v.load();
        v.src = link;
        v.play().catch(() => {});
      }, wait * 1000);
    }
  }

  customElements.define("quote-clip", QuoteClip);
})();
