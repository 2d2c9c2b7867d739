import { defineConfig } from 'vitest/config';
import react from '@vitejs/plugin-react';
import speedscope from './speedscope-plugin.mjs';

// base './' keeps asset URLs relative, so the embedded UI works wherever the
// Go server mounts it. The app uses a HashRouter: with relative assets, a
// browser path like /trace/abc would otherwise load ./assets from /trace/.
export default defineConfig({
  base: './',
  plugins: [react(), speedscope()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
  },
  server: {
    // `npm run dev` proxies the API to a local rootline (default query address).
    proxy: {
      '/api': 'http://127.0.0.1:16686',
    },
  },
  test: {
    environment: 'node',
    include: ['src/**/*.test.ts'],
  },
});
