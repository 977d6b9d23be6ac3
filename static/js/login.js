// The sign-in page (AUTH_MODE=password). Someone signed in already (or a server without accounts:
// /api/auth/me answers 200) goes straight to the app; a refused sign-in shows the server's own
// sentence (wrong password, too many attempts).

const form = document.getElementById("login-form");
const username = document.getElementById("login-username");
const password = document.getElementById("login-password");
const error = document.getElementById("login-error");
const submit = document.getElementById("login-submit");

/** The app, at the chat (or Memory page) that sent us here, if any. */
function appAddress() {
  return /^#\/[\w/-]*$/.test(location.hash) ? `/${location.hash}` : "/";
}

async function messageOf(response) {
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") return body.error;
  } catch {
    // not JSON: say the status below
  }
  return `The server answered ${response.status} ${response.statusText}`.trim();
}

async function signIn() {
  error.textContent = "";
  if (!username.value.trim() || !password.value) {
    error.textContent = "Enter your username and password.";
    (username.value.trim() ? password : username).focus();
    return;
  }
  submit.disabled = true;
  let response;
  try {
    response = await fetch("/api/auth/login", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ username: username.value.trim(), password: password.value }),
    });
  } catch {
    error.textContent = "Cannot reach the server. Check that it is running.";
    submit.disabled = false;
    return;
  }
  if (response.ok) {
    location.replace(appAddress());
    return;
  }
  error.textContent = await messageOf(response);
  submit.disabled = false;
  password.select();
  password.focus();
}

form.addEventListener("submit", (event) => {
  event.preventDefault(); // Enter in either field submits the form
  signIn();
});

fetch("/api/auth/me")
  .then((response) => {
    if (response.ok) location.replace(appAddress());
    else document.documentElement.classList.add("ready");
  })
  .catch(() => document.documentElement.classList.add("ready"));
