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
  function field(box, prefix) { return box.querySelector("[name^='" + prefix + "']"); }
  function say(box, key, message) {
    var slot = box.querySelector("[data-error='" + key + "']");
    slot.textContent = message || "";
    var input = field(box, key);
    if (input && input.type === "text") { input.setAttribute("aria-invalid", message ? "true" : "false"); }
    return message ? [slot] : [];
  }

  function conditionProblem(text, other, sentences, isLow) {
    var value = norm(text);
    if (!value) { return "Write a condition."; }
    if (/\bsentences?\b/.test(value)) { return "Do not mention \u201cthe sentence\u201d: name the attribute itself."; }
    if (sentences.indexOf(value) >= 0) { return "Do not copy a sentence: name an attribute of the scene."; }
    if (text.trim().length > MAX_CONDITION_CHARS) {
      return "Keep it to " + MAX_CONDITION_CHARS + " characters (now " + text.trim().length + ").";
    }
    if (isLow && value === norm(other)) { return "The two conditions must be different."; }
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
      return say(box, "best", message);
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
      var first = bad[0].closest("[data-check]").querySelector("input:not([type=hidden]):not(:disabled)");
      if (first) { first.focus(); }
      return;
    }
    status.textContent = "";
    button.disabled = true; // one post per assignment
    HTMLFormElement.prototype.submit.call(form); // not form.submit: a field named "submit" would hide it
  });
  function recheck() { if (shown && !problems().length) { status.textContent = ""; } }
  root.addEventListener("input", recheck);
  root.addEventListener("change", recheck);

  // keyboard: 1-5 rate and N toggles "not pertinent" (ratings); 1-4 most similar, Q W E R least similar (bws)
  var keys = root.dataset.keys;
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (!keys || event.ctrlKey || event.metaKey || event.altKey || target.type === "text" || target.tagName === "TEXTAREA") {
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
