import type { Plugin } from 'vite';
export default function speedscope(): Plugin;
