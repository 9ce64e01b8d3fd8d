export { HealthBoard, type ComponentHealth, type ComponentState } from './board.ts';
