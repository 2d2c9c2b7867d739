import type { ReactNode } from 'react';
import { openAuthorized, sameOrigin, token } from '../lib/auth';

/**
 * ArtifactLink is a download link to an artifact of this server. A plain
 * link cannot carry the API token, so with one saved the click fetches the
 * content with it and saves that instead (auth.ts).
 */
export function ArtifactLink({ href, fileName, children }: { href: string; fileName?: string; children: ReactNode }) {
  return (
    <a
      href={href}
      download={fileName || undefined}
      onClick={(e) => {
        if (!token() || !sameOrigin(href)) return;
        e.preventDefault();
        openAuthorized(href, { fileName }).catch((err: unknown) => alert(`Download failed: ${err instanceof Error ? err.message : String(err)}`));
      }}
    >
      {children}
    </a>
  );
}

/**
 * SpeedscopeLink opens an artifact in the bundled speedscope. Speedscope
 * fetches its profileURL itself, without the token: with one saved, it is
 * given a blob: URL of the content fetched with the token instead.
 */
export function SpeedscopeLink({ artifactURL, children }: { artifactURL: string; children: ReactNode }) {
  const viewer = (profileURL: string) => `./speedscope/view.html#profileURL=${encodeURIComponent(profileURL)}`;
  const direct = viewer(new URL(artifactURL, window.location.href).toString());
  return (
    <a
      href={direct}
      target="_blank"
      rel="noreferrer"
      onClick={(e) => {
        if (!token() || !sameOrigin(artifactURL)) return;
        e.preventDefault();
        // Opened now, while the click lets a page open a window; pointed at
        // the profile once it is fetched.
        const w = window.open('about:blank', '_blank');
        openAuthorized(artifactURL, {
          open: (blobURL) => {
            if (w) w.location.href = viewer(blobURL);
          },
        }).catch((err: unknown) => {
          w?.close();
          alert(`Cannot open the profile: ${err instanceof Error ? err.message : String(err)}`);
        });
      }}
    >
      {children}
    </a>
  );
}
