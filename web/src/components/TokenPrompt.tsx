import { useEffect, useRef, useState } from 'react';
import { onTokenRequest, type TokenReason } from '../lib/auth';

type Ask = { reason: TokenReason; resolve: (t: string | null) => void };

/**
 * TokenPrompt asks for the server's API token when a call is refused for the
 * lack of one (auth.ts): once per tab, as the token is kept in sessionStorage.
 */
export function TokenPrompt() {
  const [ask, setAsk] = useState<Ask | null>(null);
  const [value, setValue] = useState('');
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => onTokenRequest((reason) => new Promise((resolve) => setAsk({ reason, resolve }))), []);
  useEffect(() => {
    if (ask) input.current?.focus();
  }, [ask]);
  if (!ask) return null;
  const done = (t: string | null) => {
    ask.resolve(t);
    setAsk(null);
    setValue('');
  };
  return (
    <div className="tokenprompt" role="dialog" aria-modal="true" aria-labelledby="tokenprompt-title">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (value.trim()) done(value.trim());
        }}
      >
        <h2 id="tokenprompt-title">API token</h2>
        <p>
          {ask.reason === 'invalid'
            ? 'The server refused that token. Enter the token it was started with.'
            : 'This server asks for a token to read traces (its ROOTLINE_AUTH_TOKEN).'}{' '}
          It is kept in this tab only.
        </p>
        <input ref={input} type="password" autoComplete="off" aria-label="API token" value={value} onChange={(e) => setValue(e.target.value)} />
        <p className="buttons">
          <button type="submit" disabled={!value.trim()}>
            Use token
          </button>
          <button type="button" onClick={() => done(null)}>
            Cancel
          </button>
        </p>
      </form>
    </div>
  );
}
