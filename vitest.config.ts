import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts', 'chaos/**/*.test.ts', 'examples/**/*.test.ts'],
    // Fails a test on an unhandled error or rejection, its own or a spawned child's.
    setupFiles: ['test/setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Two cores: a few files at a time against one broker.
    maxWorkers: 2,
    fileParallelism: true,
  },
});
