// The signed-in account (AUTH_MODE=password): the user menu at the foot of the sidebar, with Sign
// out and the dialogs to change the password, manage API tokens and (admins) manage users. With
// auth_mode "none" nothing here is shown. Usernames and token names are other people's text:
// they go in with textContent (dom.js `el`), never as markup.

import { api, LOGIN_PAGE } from "./api.js";
import { closeOnBackdrop, confirmDialog } from "./dialogs.js";
import { announce, copyButton, el, toast } from "./dom.js";
import { flushPending } from "./undo.js";

const $ = (id) => document.getElementById(id);

/** "12 Mar 2025" (a day is precise enough for when a token was made or last used). */
function day(timestamp) {
  const date = new Date(timestamp);
  if (!timestamp || Number.isNaN(date.getTime())) return "";
  return date.toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
}

/** Show the account menu for `me` (GET /api/auth/me's answer); nothing outside password mode. */
export function setupAccount(me) {
  if (me?.auth_mode !== "password" || !me.user) return;
  const user = me.user;
  $("account-name").textContent = user.username;
  $("account-avatar").textContent = user.username.slice(0, 1);
  $("password-username").value = user.username;
  $("menu-users").hidden = !user.is_admin;
  $("account").hidden = false;

  const menu = createMenu();
  $("menu-sign-out").addEventListener("click", () => {
    menu.close();
    signOut();
  });
  const passwordDialog = setupPasswordDialog();
  $("menu-password").addEventListener("click", () => {
    menu.close();
    passwordDialog.open();
  });
  const tokensDialog = setupTokensDialog();
  $("menu-tokens").addEventListener("click", () => {
    menu.close();
    tokensDialog.open();
  });
  if (user.is_admin) {
    const usersDialog = setupUsersDialog(user);
    $("menu-users").addEventListener("click", () => {
      menu.close();
      usersDialog.open();
    });
  }
}

/** The menu button and its popup: click or Enter opens it, arrows move, Esc or a click outside
 *  closes it. */
function createMenu() {
  const box = $("account");
  const button = $("account-button");
  const menu = $("account-menu");
  const items = () => [...menu.querySelectorAll('[role="menuitem"]')].filter((item) => !item.hidden);
  const isOpen = () => !menu.hidden;

  function open() {
    menu.hidden = false;
    button.setAttribute("aria-expanded", "true");
    items()[0]?.focus();
  }
  function close({ restoreFocus = false } = {}) {
    if (!isOpen()) return;
    menu.hidden = true;
    button.setAttribute("aria-expanded", "false");
    if (restoreFocus) button.focus();
  }

  button.addEventListener("click", () => (isOpen() ? close() : open()));
  button.addEventListener("keydown", (event) => {
    if (event.key === "ArrowUp" || event.key === "ArrowDown") {
      event.preventDefault();
      open();
      if (event.key === "ArrowUp") items().at(-1)?.focus();
    }
  });
  menu.addEventListener("keydown", (event) => {
    const list = items();
    const at = list.indexOf(document.activeElement);
    if (event.key === "Escape") {
      event.preventDefault(); // main.js's Esc (stop a reply) leaves it alone
      close({ restoreFocus: true });
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      list[(at + step + list.length) % list.length]?.focus();
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      (event.key === "Home" ? list[0] : list.at(-1))?.focus();
    } else if (event.key === "Tab") {
      close();
    }
  });
  document.addEventListener("pointerdown", (event) => {
    if (isOpen() && !box.contains(event.target)) close();
  });
  box.addEventListener("focusout", (event) => {
    if (isOpen() && event.relatedTarget && !box.contains(event.relatedTarget)) close();
  });
  return { close };
}

async function signOut() {
  await flushPending(); // a memory delete waiting for its Undo goes while the session still works
  try {
    await api.signOut();
  } catch (error) {
    if (error.status !== 401) { // 401: signed out already
      toast(`Could not sign out: ${error.message}`, "error");
      return;
    }
  }
  location.assign(LOGIN_PAGE);
}

function setupPasswordDialog() {
  const dialog = $("password-dialog");
  const form = $("password-form");
  const current = $("password-current");
  const fresh = $("password-new");
  const repeat = $("password-repeat");
  const error = $("password-error");
  const save = $("password-save");

  $("password-cancel").addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => form.reset());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    if (!current.value) return showError("Enter your current password.", current);
    if (fresh.value.length < 8) return showError("The new password needs at least 8 characters.", fresh);
    if (fresh.value !== repeat.value) return showError("The two new passwords are not the same.", repeat);
    save.disabled = true;
    try {
      await api.changePassword(current.value, fresh.value);
    } catch (failure) {
      showError(failure.message, failure.status === 403 ? current : fresh);
      return;
    } finally {
      save.disabled = false;
    }
    dialog.close();
    toast("Password changed. Your other sessions are signed out.");
  });

  function showError(text, field) {
    error.textContent = text;
    field.focus();
    field.select?.();
  }

  return {
    open() {
      form.reset();
      error.textContent = "";
      dialog.showModal();
      current.focus();
    },
  };
}

function setupTokensDialog() {
  const dialog = $("tokens-dialog");
  const list = $("token-list");
  const form = $("token-form");
  const name = $("token-name");
  const error = $("token-error");
  const create = $("token-create");
  const fresh = $("token-new");
  const value = $("token-value");
  const copy = copyButton("Copy", "Copy the new token", () => value.textContent);
  $("token-new-row").append(copy);

  $("tokens-close").addEventListener("click", () => dialog.close());
  closeOnBackdrop(dialog);
  // Shown once: closing the dialog forgets the new token.
  dialog.addEventListener("close", () => {
    value.textContent = "";
    fresh.hidden = true;
    form.reset();
    error.textContent = "";
  });

  async function load() {
    list.setAttribute("aria-busy", "true");
    try {
      render(await api.tokens());
    } catch (failure) {
      list.replaceChildren(el("li", { class: "list-note", text: `Could not load your tokens: ${failure.message}` }));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  function render(tokens) {
    if (!tokens.length) {
      list.replaceChildren(el("li", { class: "list-note", text: "No tokens yet." }));
      return;
    }
    list.replaceChildren(...tokens.map((token) => {
      const used = token.last_used_at ? `last used ${day(token.last_used_at)}` : "never used";
      const revoke = el("button", { type: "button", class: "secondary-button small", "aria-label": `Revoke ${token.name}`, text: "Revoke" });
      revoke.addEventListener("click", () => revokeToken(token, revoke));
      return el(
        "li",
        { class: "item-row", dataset: { tokenId: token.token_id } },
        el("div", { class: "item-main" },
          el("span", { class: "item-name", text: token.name }),
          el("span", { class: "item-meta", text: `Created ${day(token.created_at)} · ${used}` })),
        revoke,
      );
    }));
  }

  async function revokeToken(token, button) {
    const { confirmed } = await confirmDialog({
      title: "Revoke this token?",
      text: `Scripts that use “${token.name}” can no longer reach the API. This cannot be undone.`,
      confirm: "Revoke",
    });
    if (!confirmed) {
      button.focus();
      return;
    }
    try {
      await api.revokeToken(token.token_id);
    } catch (failure) {
      if (failure.status !== 404) {
        error.textContent = `Could not revoke the token: ${failure.message}`;
        return;
      }
    }
    announce(`Revoked ${token.name}`);
    await load();
    name.focus();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const wanted = name.value.trim();
    if (!wanted) {
      error.textContent = "Give the token a name, so you know later what uses it.";
      name.focus();
      return;
    }
    create.disabled = true;
    let made;
    try {
      made = await api.createToken(wanted);
    } catch (failure) {
      error.textContent = `Could not create the token: ${failure.message}`;
      return;
    } finally {
      create.disabled = false;
    }
    value.textContent = made.token;
    fresh.hidden = false;
    form.reset();
    announce(`Created the token ${made.name}. Copy it now: it is not shown again.`);
    copy.focus();
    await load();
  });

  return {
    open() {
      value.textContent = "";
      fresh.hidden = true;
      error.textContent = "";
      list.replaceChildren();
      dialog.showModal();
      name.focus();
      load();
    },
  };
}

function setupUsersDialog(me) {
  const dialog = $("users-dialog");
  const list = $("user-list");
  const form = $("user-form");
  const username = $("user-name");
  const password = $("user-password");
  const admin = $("user-admin");
  const error = $("user-error");
  const add = $("user-add");
  let users = [];

  $("users-close").addEventListener("click", () => dialog.close());
  closeOnBackdrop(dialog);
  dialog.addEventListener("close", () => {
    form.reset();
    error.textContent = "";
  });

  async function load() {
    list.setAttribute("aria-busy", "true");
    try {
      users = await api.users();
      render();
    } catch (failure) {
      list.replaceChildren(el("li", { class: "list-note", text: `Could not load the users: ${failure.message}` }));
    } finally {
      list.setAttribute("aria-busy", "false");
    }
  }

  function render() {
    list.replaceChildren(...users.map((user) => {
      const self = user.user_id === me.user_id;
      const badges = [
        user.is_admin && el("span", { class: "badge small badge-admin", text: "Admin" }),
        user.disabled && el("span", { class: "badge small badge-disabled", text: "Disabled" }),
        self && el("span", { class: "badge small badge-you", text: "You" }),
      ];
      let toggle = null;
      if (!self) { // the server refuses to disable yourself (409)
        toggle = el("button", {
          type: "button",
          class: user.disabled ? "secondary-button small" : "danger-outline-button small",
          "aria-label": `${user.disabled ? "Enable" : "Disable"} ${user.username}`,
          text: user.disabled ? "Enable" : "Disable",
        });
        toggle.addEventListener("click", () => setDisabled(user, !user.disabled));
      }
      return el(
        "li",
        { class: `item-row${user.disabled ? " disabled" : ""}`, dataset: { userId: user.user_id } },
        el("div", { class: "item-main" },
          el("span", { class: "item-name" }, el("span", { text: user.username }), ...badges),
          el("span", { class: "item-meta", text: `Added ${day(user.created_at)}` })),
        toggle,
      );
    }));
  }

  async function setDisabled(user, disabled) {
    error.textContent = "";
    try {
      const changed = await api.setUserDisabled(user.user_id, disabled);
      users = users.map((u) => (u.user_id === changed.user_id ? changed : u));
    } catch (failure) {
      error.textContent = `Could not ${disabled ? "disable" : "enable"} ${user.username}: ${failure.message}`;
      return;
    }
    render();
    announce(`${disabled ? "Disabled" : "Enabled"} ${user.username}`);
    list.querySelector(`[data-user-id="${CSS.escape(String(user.user_id))}"] button`)?.focus();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    const name = username.value.trim();
    if (!name || !password.value) {
      error.textContent = "Enter a username and a password.";
      (name ? password : username).focus();
      return;
    }
    if (password.value.length < 8) {
      error.textContent = "The password needs at least 8 characters.";
      password.focus();
      return;
    }
    add.disabled = true;
    let added;
    try {
      added = await api.addUser(name, password.value, admin.checked);
    } catch (failure) {
      error.textContent = `Could not add ${name}: ${failure.message}`;
      username.focus();
      return;
    } finally {
      add.disabled = false;
    }
    form.reset();
    announce(`Added ${added.username}`);
    username.focus();
    await load();
  });

  return {
    open() {
      form.reset();
      error.textContent = "";
      list.replaceChildren();
      dialog.showModal();
      username.focus();
      load();
    },
  };
}
