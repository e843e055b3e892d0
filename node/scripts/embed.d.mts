export function sync(): void;
export function assets(): string;
