// Copies the npm package speedscope's built viewer (dist/release) into
// <outDir>/speedscope/, so the UI can open an artifact in a self-hosted
// speedscope: ./speedscope/view.html#profileURL=<artifact URL>. The page is
// renamed from index.html because Go's file server redirects …/index.html to
// the directory, which web.go answers with the app's own index. Nothing is
// loaded from the network. Plain JS so vite.config.ts needs no Node types.
import { cpSync, existsSync, renameSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

export default function speedscope() {
  let outDir = 'dist';
  return {
    name: 'rootline-speedscope',
    apply: 'build',
    configResolved(config) {
      outDir = config.build.outDir.startsWith('/') ? config.build.outDir : join(config.root, config.build.outDir);
    },
    writeBundle() {
      const pkg = createRequire(import.meta.url).resolve('speedscope/package.json');
      const src = join(dirname(pkg), 'dist', 'release');
      if (!existsSync(join(src, 'index.html'))) throw new Error(`speedscope's build is missing at ${src}`);
      // The package's demo profile is left out.
      const dst = join(outDir, 'speedscope');
      cpSync(src, dst, { recursive: true, filter: (f) => !f.endsWith('.txt') || f.endsWith('release.txt') });
      renameSync(join(dst, 'index.html'), join(dst, 'view.html'));
    },
  };
}
