/**
 * Loads @peculiar/x509 the way it must be loaded: `reflect-metadata` first (the library's
 * dependency injection reads decorator metadata at import time), then the library, wired to
 * node's WebCrypto implementation so no other crypto provider is involved.
 */
import "reflect-metadata";
import { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";

// The library's `Crypto` is the DOM type, which this project does not load; node's
// implementation is the real thing.
x509.cryptoProvider.set(webcrypto as never);

/** The configured @peculiar/x509 module. */
export { x509 };
