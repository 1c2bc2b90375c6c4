// What the pages share: every data call goes through api(), which sends the API key the user signed in with on
// this tab (kept in sessionStorage: never in a URL, a cookie or a log) and, when the service answers 401, asks for
// one on the page and tries again. The page shells themselves need no key; every data route does.
(() => {
  const STORE = "quoteclip.key";
  let waiting = null;  // the sign-in being asked for, shared by calls that meet a 401 at once

  function signIn(message) {
    if (waiting) return waiting;
    const bar = document.createElement("form");
    bar.id = "sign-in";
    bar.style.cssText = "background:#fff3cd;padding:.8rem 1rem;display:flex;gap:.6rem;align-items:center;flex-wrap:wrap";
    // Built element by element, styled through the CSSOM: the pages' Content-Security-Policy allows no style
    // attribute in markup.
    const said = document.createElement("span");
    said.textContent = message;
    const input = Object.assign(document.createElement("input"),
      { id: "api-key", type: "password", autocomplete: "off", placeholder: "API key" });
    input.style.cssText = "flex:1;min-width:12rem;padding:.4rem";
    const button = Object.assign(document.createElement("button"), { type: "submit", textContent: "Sign in" });
    bar.append(said, input, button);
    document.body.prepend(bar);
    bar.querySelector("input").focus();
    waiting = new Promise((resolve) => {
      bar.addEventListener("submit", (event) => {
        event.preventDefault();
        sessionStorage.setItem(STORE, bar.querySelector("input").value.trim());
        bar.remove();
        waiting = null;
        resolve();
      });
    });
    return waiting;
  }

  window.api = async function api(url, init = {}) {
    for (let attempt = 0; ; attempt++) {
      const headers = new Headers(init.headers || {});
      const key = sessionStorage.getItem(STORE);
      if (key) headers.set("X-API-Key", key);
      const response = await fetch(url, { ...init, headers });
      if (response.status !== 401 || attempt > 3) return response;
      await signIn(key ? "That key was not accepted: sign in with another." : "This service needs an API key.");
    }
  };
})();
