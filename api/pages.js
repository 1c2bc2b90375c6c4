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
    bar.innerHTML = '<span></span><input id="api-key" type="password" autocomplete="off" placeholder="API key"' +
      ' style="flex:1;min-width:12rem;padding:.4rem"><button type="submit">Sign in</button>';
    bar.querySelector("span").textContent = message;
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
