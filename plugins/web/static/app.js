// Progressive enhancement only: every page and form works without this file.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // Forms with data-confirm ask before they are sent (e.g. "Leave <community>?").
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  // Radio buttons with aria-controls show only the chosen option's extra fields.
  function syncConditionals() {
    document.querySelectorAll("input[type=radio][aria-controls]").forEach(function (radio) {
      var panel = document.getElementById(radio.getAttribute("aria-controls"));
      if (panel) {
        panel.hidden = !radio.checked;
      }
    });
  }
  // A chosen picture is shown before it is uploaded (the upload works without this).
  function preview(input) {
    var kind = input.getAttribute("data-preview");
    var img = document.querySelector("img[data-preview-for='" + kind + "']");
    var empty = document.querySelector("[data-preview-empty='" + kind + "']");
    var file = input.files && input.files[0];
    if (!img || !file || !/^image\/(png|jpeg)$/.test(file.type)) {
      return;
    }
    if (img.dataset.objectUrl) {
      URL.revokeObjectURL(img.dataset.objectUrl);
    }
    img.dataset.objectUrl = URL.createObjectURL(file);
    img.src = img.dataset.objectUrl;
    img.alt = "Preview of the new " + kind;
    img.hidden = false;
    if (empty) {
      empty.hidden = true;
    }
  }

  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("input[type=radio]")) {
      syncConditionals();
    }
    if (event.target.matches && event.target.matches("input[type=file][data-preview]")) {
      preview(event.target);
    }
  });

  // Copy buttons (hidden without this script): copy the named field and say so.
  function copyFrom(button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    var status = document.querySelector("[data-copy-status]");
    function done(ok) {
      if (status) {
        status.textContent = ok ? "Copied." : "Select the text and copy it yourself.";
      }
    }
    source.select();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.value).then(function () { done(true); },
        function () { done(document.execCommand("copy")); });
    } else {
      done(document.execCommand("copy"));
    }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (button) {
      copyFrom(button);
    }
  });

  // Moments are written in UTC ("23 Nov 2026, 20:40 UTC"); shown in the browser's own time
  // zone, in the same format, when it can tell which that is.
  function localTimes() {
    var format;
    try {
      format = new Intl.DateTimeFormat("en-GB", {day: "numeric", month: "short", year: "numeric",
        hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short"});
    } catch (e) {
      return;
    }
    document.querySelectorAll("time[data-local]").forEach(function (el) {
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date.getTime())) {
        return;
      }
      var parts = {};
      format.formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
      el.textContent = parts.day + " " + parts.month + " " + parts.year + ", " + parts.hour + ":" +
        parts.minute + " " + (parts.timeZoneName || "UTC");
      el.title = "Your time zone";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    syncConditionals();
    localTimes();
    document.querySelectorAll("button[data-copy]").forEach(function (button) {
      button.hidden = false;
    });
    // An error summary takes the focus, so screen readers announce it first.
    var summary = document.querySelector("[data-focus]");
    if (summary) {
      summary.focus();
    }
  });
})();
