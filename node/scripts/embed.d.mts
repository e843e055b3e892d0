export function assets(): string;
