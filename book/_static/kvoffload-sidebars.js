// Make every sidebar toggle open its sidebar, the visible ones on a phone included.
//
// pydata-sphinx-theme 0.17 renders a ☰ and an "On this page" toggle in its navbar (hidden by
// sphinx-book-theme) before the book theme's own pair in the article header, and both themes
// bind only the first match of ".primary-toggle" / ".secondary-toggle" (pydata-sphinx-theme
// issue 2451): a tap on the visible button showed its tooltip and opened nothing. A click on any
// later toggle is handed to the first, so the themes' own handlers run: the drawer (a <dialog>
// opened with showModal) on a narrow screen, the sidebar collapsing on a wide one.
document.addEventListener("DOMContentLoaded", () => {
  for (const selector of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(selector);
    for (const button of others) {
      button.addEventListener(
        "click",
        (event) => {
          event.preventDefault();
          event.stopImmediatePropagation(); // one opening, should a theme bind this button too
          button.blur(); // as the book theme does for its first toggle: the tooltip goes too
          bound.click();
        },
        true,
      );
    }
  }
});
