/** The fleet page's entry point (bundled by scripts/build-fleet-ui.ts into dist/ui). */
import "uplot/dist/uPlot.min.css";
import "./styles.css";
import { render } from "preact";
import { App } from "./app.js";

const root = document.getElementById("app");
if (root !== null) render(<App />, root);
