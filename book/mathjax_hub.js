// ipywidgets' HTML manager typesets each widget label with MathJax 2's call, MathJax.Hub.Queue(["Typeset",
// MathJax.Hub, element]), whenever window.MathJax exists, and MathJax 3 has no Hub: without this, drawing a slider
// throws. Once MathJax 3 has started (before the page's load event, when the manager draws the widgets), it gets a Hub
// whose Queue does the same through MathJax 3's typesetPromise. Sphinx puts this file after the MathJax configuration.
window.MathJax = {
  ...window.MathJax,
  startup: {
    ready() {
      MathJax.startup.defaultReady();
      MathJax.Hub = {Queue: (...calls) => calls.forEach(([, , element]) => MathJax.typesetPromise([element]))};
    },
  },
};
