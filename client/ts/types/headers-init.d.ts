// Connect's .d.ts files name the DOM type `HeadersInit`, which @types/node 20
// does not declare globally (it has the global `Headers` class, though). This
// script-scope declaration fills the gap for type checking without pulling in
// the whole DOM lib. Consumers on Node 20 need the same line (or `"lib":
// ["DOM"]`, or `skipLibCheck`); see README.md.
type HeadersInit = ConstructorParameters<typeof Headers>[0];
