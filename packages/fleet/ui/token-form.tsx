/** Asks for a bearer token when the API answered 401. */
import { useState } from "preact/hooks";

/** The token form; `refused` says a token was sent and answered 401. */
export function TokenForm(props: { refused: boolean; submit: (token: string) => void }) {
  const [value, setValue] = useState("");
  return (
    <form
      class="token-form"
      data-testid="token-form"
      onSubmit={(e) => {
        e.preventDefault();
        const token = value.trim();
        if (token !== "") props.submit(token);
      }}
    >
      <h2>Sign in</h2>
      {props.refused && (
        <p class="error" role="alert">
          The server refused that token (401).
        </p>
      )}
      <label for="token">Bearer token</label>
      <p id="token-help" class="help">
        A hub token: <code>kubectl create token &lt;serviceaccount&gt;</code>, or your OIDC ID token. It is kept in this
        tab only (sessionStorage) and sent as <code>Authorization: Bearer</code>.
      </p>
      <input
        id="token"
        name="token"
        type="password"
        autocomplete="off"
        spellcheck={false}
        aria-describedby="token-help"
        value={value}
        onInput={(e) => setValue(e.currentTarget.value)}
        autoFocus
      />
      <button type="submit">Show the fleet</button>
    </form>
  );
}
