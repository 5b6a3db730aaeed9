/* csts-pipeline HIT pages: the MTurk round trip, the in-page checks and the keyboard, shared by every stage and
   inlined into each template.html at export. MTurk fills the page's placeholders itself, so this script must not
   contain a dollar sign followed by a brace. The checks mirror stages/annotate/qualification.py. */
(function () {
  "use strict";
  var MAX_CONDITION_CHARS = 80;
  var params = new URLSearchParams(window.location.search);
  var assignmentId = params.get("assignmentId") || "";
  var submitTo = (params.get("turkSubmitTo") || "").replace(/\/+$/, "");
  var preview = assignmentId === "" || assignmentId === "ASSIGNMENT_ID_NOT_AVAILABLE";
  var root = document.getElementById("hit");
  // our own form, or the one a requester site wraps the layout in (the parser drops a form nested in another)
  var form = root.closest("form");
  var button = document.getElementById("hit-submit");
  var status = document.getElementById("status");
  var shown = false;

  function norm(text) { return (text || "").replace(/\s+/g, " ").trim().toLowerCase(); }
  // two conditions are the same when they differ only in case, punctuation and spaces (crowd.same_text)
  function sameKey(text) { return norm((text || "").replace(/[\p{P}\p{S}]/gu, " ")); }
  function field(box, prefix) { return box.querySelector("[name^='" + prefix + "']"); }
  // the message in its slot; a problem is {slot, input}: the input is where focus goes when it is the first
  function say(box, name, message, input) {
    var slot = box.querySelector("[data-error='" + name + "']");
    slot.textContent = message || "";
    input = input || field(box, name);
    if (input && input.type === "text") { input.setAttribute("aria-invalid", message ? "true" : "false"); }
    return message ? [{ slot: slot, input: input }] : [];
  }

  function conditionProblem(text, other, sentences, isLow) {
    var value = norm(text);
    if (!value) { return "Write a condition."; }
    if (/\bsentences?\b/.test(value)) { return "Do not mention \u201cthe sentence\u201d: name the attribute itself."; }
    if (sentences.indexOf(value) >= 0) { return "Do not copy a sentence: name an attribute of the scene."; }
    if (text.trim().length > MAX_CONDITION_CHARS) {
      return "Keep it to " + MAX_CONDITION_CHARS + " characters (now " + text.trim().length + ").";
    }
    if (isLow && sameKey(text) === sameKey(other)) { return "The two conditions must be different."; }
    return "";
  }

  var checks = {
    conditions: function (box) {
      var sentences = Array.prototype.map.call(box.querySelectorAll("[data-sentence]"), function (s) {
        return norm(s.textContent);
      });
      var high = field(box, "condition_high").value, low = field(box, "condition_low").value;
      return say(box, "condition_high", conditionProblem(high, low, sentences, false))
        .concat(say(box, "condition_low", conditionProblem(low, high, sentences, true)));
    },
    rating: function (box) {
      var flagged = field(box, "not_pertinent").checked;
      var chosen = box.querySelector("input[name^='rating']:checked");
      return say(box, "rating", flagged || chosen ? "" : "Choose a rating from 1 to 5, or tick \u201cnot pertinent\u201d.");
    },
    bws: function (box) {
      var best = box.querySelector("input[name='best']:checked"), worst = box.querySelector("input[name='worst']:checked");
      var message = !best ? "Choose the most similar pair." : !worst ? "Choose the least similar pair." :
        best.value === worst.value ? "The most and the least similar must be different pairs." : "";
      var input = !best ? field(box, "best") : worst || field(box, "worst");
      return say(box, "best", message, input);
    }
  };

  function problems() {
    var found = [];
    root.querySelectorAll("[data-check]").forEach(function (box) { found = found.concat(checks[box.dataset.check](box)); });
    return found;
  }

  // not pertinent is decided first: ticking it sets the rating aside
  root.querySelectorAll("[data-check='rating']").forEach(function (box) {
    var flag = field(box, "not_pertinent");
    flag.addEventListener("change", function () {
      box.querySelectorAll("input[name^='rating']").forEach(function (radio) {
        radio.disabled = flag.checked;
        if (flag.checked) { radio.checked = false; }
      });
    });
  });

  if (form.id === "hit-form") {
    form.action = submitTo + "/mturk/externalSubmit";
    document.getElementById("assignmentId").value = assignmentId;
  } else {
    document.getElementById("assignmentId").remove(); // the wrapping form carries its own
  }
  if (preview) {
    button.disabled = true;
    document.getElementById("preview").hidden = false;
  }

  // held first, posted only once every check has passed: an error in a check can never let an answer through
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    if (preview) { return; }
    var bad = problems();
    shown = true;
    if (bad.length) {
      status.textContent = "Please fix the " + (bad.length === 1 ? "marked field" : bad.length + " marked fields") + ".";
      // focus the first field in error (in page order), with its message in view
      bad.sort(function (a, b) {
        return a.slot.compareDocumentPosition(b.slot) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1;
      });
      if (bad[0].input) { bad[0].input.focus(); }
      bad[0].slot.scrollIntoView({ block: "nearest" });
      return;
    }
    status.textContent = "";
    button.disabled = true; // one post per assignment
    HTMLFormElement.prototype.submit.call(form); // not form.submit: a field named "submit" would hide it
  });
  function recheck() { if (shown && !problems().length) { status.textContent = ""; } }
  root.addEventListener("input", recheck);
  root.addEventListener("change", recheck);

  // Enter in the first condition field moves on to the second instead of submitting
  root.querySelectorAll("input[name^='condition_high']").forEach(function (high) {
    high.addEventListener("keydown", function (event) {
      if (event.key !== "Enter" || event.isComposing) { return; }
      event.preventDefault();
      field(high.closest("[data-check]"), "condition_low").focus();
    });
  });

  // the guidelines: a dialog one click away, opened by itself only until the worker has closed it once for this
  // version of the guide (remembered in localStorage; a changed guide has a new version and opens again)
  var version = root.dataset.guideVersion || "";
  function seenKey(dialog) { return "csts-guide:" + dialog.id + ":" + version; }
  function seen(dialog) { try { return localStorage.getItem(seenKey(dialog)) === "1"; } catch (e) { return false; } }
  function remember(dialog) { try { localStorage.setItem(seenKey(dialog), "1"); } catch (e) { /* not kept */ } }
  var guides = Array.prototype.slice.call(root.querySelectorAll("dialog.guide"));
  var opener = null;
  function openGuide(dialog, from) {
    opener = from || null;
    if (!dialog.open) { dialog.showModal(); }
  }
  guides.forEach(function (dialog) {
    dialog.querySelector("[data-guide-close]").addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("close", function () {
      remember(dialog);
      var next = opener ? null : guides.filter(function (g) { return !seen(g); })[0];
      if (next) { openGuide(next); return; }
      var back = opener || root.querySelector("[data-check] input:not([type=hidden]):not(:disabled)");
      opener = null;
      if (back) { back.focus(); }
    });
  });
  root.querySelectorAll("[data-guide]").forEach(function (button) {
    button.addEventListener("click", function () { openGuide(document.getElementById(button.dataset.guide), button); });
  });
  var unseen = guides.filter(function (g) { return !seen(g); })[0];
  if (unseen) { openGuide(unseen); }

  // keyboard: 1-5 rate and N toggles "not pertinent" (ratings); 1-4 most similar, Q W E R least similar (bws)
  var keys = root.dataset.keys;
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (!keys || event.ctrlKey || event.metaKey || event.altKey || target.type === "text" || target.tagName === "TEXTAREA" ||
        target.closest("dialog")) {
      return;
    }
    var key = event.key.toLowerCase(), pick = null;
    if (keys === "rating" && /^[1-5]$/.test(key)) {
      pick = root.querySelector("input[name='rating'][value='" + key + "']:not(:disabled)");
    } else if (keys === "rating" && key === "n") {
      pick = root.querySelector("input[name='not_pertinent']");
    } else if (keys === "bws" && /^[1-4]$/.test(key)) {
      pick = root.querySelector("input[name='best'][value='" + key + "']");
    } else if (keys === "bws" && "qwer".indexOf(key) >= 0 && key.length === 1) {
      pick = root.querySelector("input[name='worst'][value='" + ("qwer".indexOf(key) + 1) + "']");
    }
    if (pick) { event.preventDefault(); pick.click(); }
  });
})();
