// The `ai` package's .d.ts files name DOM types (`RequestCredentials`,
// `FileList`, `MediaStream`) in its browser-side APIs, which @types/node 20
// does not declare. These script-scope declarations stand in for them so the
// adapter in src/ai-sdk.ts type-checks without the whole DOM lib; the adapter
// uses none of those APIs.
type RequestCredentials = "include" | "omit" | "same-origin";
interface FileList {
  readonly length: number;
}
interface MediaStream {
  readonly id: string;
}
